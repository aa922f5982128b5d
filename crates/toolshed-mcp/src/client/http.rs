//! Streamable HTTP servers: rmcp's transport over our guarded reqwest client, with
//! header and bearer auth whose values come from credentials.
