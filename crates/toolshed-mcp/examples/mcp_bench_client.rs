//! The client benchmark (bench/mcp-client.sh): N `tools/call`s of `echo` over stdio.
fn main() {}
