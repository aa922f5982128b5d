//! Stdio servers: a child in the sandbox (or, on the developer's opt-in, a plain child
//! process), its stderr read into a capped log, shut down by closing stdin, then
//! SIGTERM, then SIGKILL.
