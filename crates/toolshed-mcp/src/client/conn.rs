//! One server's connection: started on first use, restarted with backoff after it
//! died, its tool list cached until the server says it changed.

/// The connection state of one server.
pub(crate) struct Connection {}
