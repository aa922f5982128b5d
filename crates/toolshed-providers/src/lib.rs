//! # toolshed-providers
//!
//! IO implementations of the traits `toolshed-core` defines:
//!
//! - [`VaultProvider`]: a [`toolshed_core::CredentialProvider`] reading a HashiCorp Vault
//!   or OpenBao KV v2 mount over HTTP;
//! - [`LocalBlobStore`]: a [`toolshed_core::BlobStore`] keeping content-addressed blobs in
//!   a local folder.

pub mod blob;
pub mod vault;

pub use blob::{LocalBlobStore, Released};
pub use vault::{VaultConfig, VaultProvider};
