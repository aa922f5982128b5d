//! Times `bash true` and a small `write_file` of `sandbox: true` through the pipeline,
//! with an empty workspace and with 1,000 and 10,000 files in it (BENCHMARKS.md,
//! "Sandboxed tools through dispatch and the server"). Needs root (the sandbox).
//!
//! `cargo run -p toolshed-agent --example workspace_calls [CALLS]` (default 30 calls
//! per row); prints one line per row: the median and the mean, in milliseconds.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::json;
use toolshed_agent::{
    ImplementationError, Implementations, WorkspaceConfig, Workspaces, load_agent_with_workspaces,
};
use toolshed_core::{Handler, Pipeline, RunContext, Tool, ToolCall};

/// The workspace tools are in-process: no code files or endpoints.
struct NoImplementations;

#[async_trait]
impl Implementations for NoImplementations {
    async fn load_code_file(&self, path: &Path) -> Result<Tool, ImplementationError> {
        Err(ImplementationError::Unsupported(path.display().to_string()))
    }
    fn handler_for(
        &self,
        e: &str,
        _: &toolshed_core::ToolSpec,
    ) -> Result<Arc<dyn Handler>, ImplementationError> {
        Err(ImplementationError::Unsupported(e.to_owned()))
    }
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn summary(mut times: Vec<Duration>) -> String {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mean = times.iter().map(|d| ms(*d)).sum::<f64>() / times.len() as f64;
    format!(
        "p50 {:7.2} ms   mean {:7.2} ms",
        ms(times[times.len() / 2]),
        mean
    )
}

#[tokio::main]
async fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(30);
    let project = tempfile::tempdir().expect("a temp folder");
    std::fs::write(
        project.path().join("agent.yaml"),
        "name: bench\nsandbox: true\n",
    )
    .expect("agent.yaml");
    let root = tempfile::tempdir().expect("a temp folder");
    let workspaces = Workspaces::new(WorkspaceConfig::new(root.path().join("workspaces")));
    let loaded = load_agent_with_workspaces(
        project.path(),
        &NoImplementations,
        None,
        &no_env,
        Some(&workspaces),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let pipeline = Pipeline::builder(loaded.toolset.clone()).build();
    for files in [0usize, 1_000, 10_000] {
        let run_id = format!("bench-{files}");
        let ctx = RunContext::builder().run_id(&run_id).build();
        // The folder exists after a first call; then it gets its files, 100 per folder.
        let first = pipeline
            .call(&ctx, ToolCall::new("bash", json!({"command": "true"})))
            .await;
        first.result.unwrap_or_else(|e| panic!("{e}"));
        let folder = workspaces.folder(&run_id).expect("a run id");
        for i in 0..files {
            let dir = folder.join(format!("d{}", i / 100));
            std::fs::create_dir_all(&dir).expect("a folder");
            std::fs::write(dir.join(format!("f{i}.txt")), "some text\n").expect("a file");
        }
        let mut bash = Vec::with_capacity(calls);
        let mut write = Vec::with_capacity(calls);
        for i in 0..calls {
            let start = Instant::now();
            let out = pipeline
                .call(&ctx, ToolCall::new("bash", json!({"command": "true"})))
                .await;
            bash.push(start.elapsed());
            out.result.unwrap_or_else(|e| panic!("{e}"));
            let start = Instant::now();
            let out = pipeline
                .call(
                    &ctx,
                    ToolCall::new(
                        "write_file",
                        json!({"path": format!("w{}.txt", i % 3), "content": "x"}),
                    ),
                )
                .await;
            write.push(start.elapsed());
            out.result.unwrap_or_else(|e| panic!("{e}"));
        }
        println!(
            "{files:>6} files: bash true {}   write_file {}",
            summary(bash),
            summary(write)
        );
    }
}
