//! [`Implementations`] over the dispatch layer: code files become subprocess tools with
//! inferred schemas (bread and Toren tool files with the rest of their definition),
//! endpoint strings become dispatch handlers.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use toolshed_core::{Handler, Tool, ToolSpec};
use toolshed_dispatch::{Dispatcher, Endpoint, SandboxPolicy};
use toolshed_sandbox::Network;

use crate::{ImplementationError, Implementations};

/// Loads tools through a [`Dispatcher`]. Their processes run in the dispatcher's
/// sandbox with [`DispatchImplementations::with_policy`]'s policy (by default: no
/// network, the server's default limits, nothing of the host but the tool's folder),
/// plus the network for a tool whose definition declares `network_access: true`.
#[derive(Clone)]
pub struct DispatchImplementations {
    dispatcher: Dispatcher,
    policy: SandboxPolicy,
}

impl DispatchImplementations {
    /// Use this dispatcher (give it the built-ins with `Dispatcher::with_builtins`).
    pub fn new(dispatcher: Dispatcher) -> Self {
        DispatchImplementations {
            dispatcher,
            policy: SandboxPolicy::default(),
        }
    }

    /// Run every tool with this sandbox policy.
    pub fn with_policy(mut self, policy: SandboxPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Show the agent's project folder read-only to its tools (on a developer's own
    /// machine: local tools keep reading their project, and nothing else of the host).
    pub fn with_project(mut self, dir: &Path) -> Self {
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        self.policy = self.policy.project(dir);
        self
    }
}

#[async_trait]
impl Implementations for DispatchImplementations {
    async fn load_code_file(&self, path: &Path) -> Result<Tool, ImplementationError> {
        let abs = std::fs::canonicalize(path).map_err(ImplementationError::Path)?;
        let ext = abs.extension().and_then(|e| e.to_str()).unwrap_or("");
        if ext == "py" {
            // The file says which function is its tool (the one named like it, else its
            // only public one), so the file need not be named after the function.
            let inferred = self.dispatcher.infer_python_file(&abs, None).await?;
            let endpoint = Endpoint::parse(&format!("python:{}:{}", abs.display(), inferred.name))?;
            return Ok(self.dispatcher.tool_from_inferred(
                endpoint,
                inferred,
                self.policy.clone(),
            )?);
        }
        let endpoint = Endpoint::parse(&format!("node:{}", abs.display()))?;
        let inferred = self.dispatcher.infer_schema(&endpoint).await?;
        // A bread or Toren file's effects, approval, hooks, … come with its schemas.
        Ok(self
            .dispatcher
            .tool_from_inferred(endpoint, inferred, self.policy.clone())?)
    }

    fn handler_for(
        &self,
        endpoint: &str,
        spec: &ToolSpec,
    ) -> Result<Arc<dyn Handler>, ImplementationError> {
        let endpoint = Endpoint::parse(endpoint)?;
        // The network as the tool's spec declares it (`network_access: true`); the
        // dispatcher's sandbox still clamps it to off where the host allows none.
        let mut policy = self.policy.clone();
        if spec.meta.network_access {
            policy = policy.network(Network::On);
        }
        Ok(self
            .dispatcher
            .handler_with(endpoint, spec.name.as_str(), policy))
    }
}
