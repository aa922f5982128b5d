//! What several of this crate's test files share.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use toolshed_agent::{ImplementationError, Implementations};
use toolshed_core::{Handler, Tool, ToolSpec};

/// Resolves `builtin:NAME` from the standard library; code files are out of scope for
/// the tests that use it (the dispatch layer's own tests cover them).
pub struct Builtins;

#[async_trait]
impl Implementations for Builtins {
    async fn load_code_file(&self, path: &Path) -> Result<Tool, ImplementationError> {
        Err(ImplementationError::Unsupported(format!(
            "{} needs the dispatch layer",
            path.display()
        )))
    }

    fn handler_for(
        &self,
        endpoint: &str,
        _spec: &ToolSpec,
    ) -> Result<Arc<dyn Handler>, ImplementationError> {
        let name = endpoint.strip_prefix("builtin:").ok_or_else(|| {
            ImplementationError::Unsupported(format!("unsupported endpoint {endpoint}"))
        })?;
        toolshed_stdlib::get(name)
            .map(|t| t.handler().clone())
            .ok_or_else(|| ImplementationError::Unsupported(format!("no built-in {name}")))
    }
}
