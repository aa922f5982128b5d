//! Model-vendor tool formats.
