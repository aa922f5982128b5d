//! The route handlers, one module per area, and the OpenAPI document they make up.

pub mod auth;
pub mod meta;
pub mod registry;
pub mod runs;
