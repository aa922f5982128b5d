//! The crash-test driver: runs (or resumes) a run of N keyed calls whose handler appends
//! one fsync'd line per execution to a ledger file. `tests/crash.rs` kills it with
//! SIGKILL at random moments and starts it again until the run completes.
//!
//! Usage: `toolshed-crash-driver URL SCHEMA|- RUN_ID LEDGER CALLS`
//! (SCHEMA is a PostgreSQL schema to use, `-` for none.)

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::json;
use toolshed_core::{Idempotency, Pipeline, Tool, ToolCall, ToolSet};
use toolshed_journal::Journal;
use toolshed_runtime::{CallStep, NewRunBuilder, Runtime, RuntimeConfig, RuntimeError};
use toolshed_testkit::MAX_ATTEMPTS;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crash driver: {e}");
            ExitCode::from(1)
        }
    }
}

async fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, schema, run_id, ledger, calls] = args.as_slice() else {
        return Err("usage: toolshed-crash-driver URL SCHEMA|- RUN_ID LEDGER CALLS".into());
    };
    let calls: u32 = calls.parse().map_err(|e| format!("CALLS: {e}"))?;
    let journal: Arc<dyn Journal> = if schema == "-" {
        toolshed_journal::open(url)
            .await
            .map_err(|e| e.to_string())?
    } else {
        toolshed_journal::open_in_schema(url, schema)
            .await
            .map_err(|e| e.to_string())?
    };
    let ledger = ledger.clone();
    let append = Tool::builder("append")
        .description("Append one line per execution to the ledger, fsync'd.")
        .input_schema(
            json!({"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]}),
        )
        .idempotency(Idempotency::Keyed)
        .max_attempts(MAX_ATTEMPTS)
        .handler(move |args, ctx| {
            let ledger = ledger.clone();
            async move {
                let line = format!("{} {}\n", args["i"], ctx.idempotency_key().unwrap_or("-"));
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&ledger)
                    .map_err(|e| e.to_string())?;
                f.write_all(line.as_bytes()).map_err(|e| e.to_string())?;
                f.sync_data().map_err(|e| e.to_string())?;
                Ok::<_, String>(args["i"].clone())
            }
        })
        .build()
        .map_err(|e| e.to_string())?;
    let pipeline =
        Pipeline::builder(ToolSet::from_tools([append]).map_err(|e| e.to_string())?).build();
    let runtime = Runtime::new(pipeline, journal.clone(), RuntimeConfig::default())
        .map_err(|e| e.to_string())?;
    let handle = match journal.get_run(run_id).await {
        Ok(_) => match runtime.resume(run_id).await {
            Ok(h) => h,
            Err(RuntimeError::RunFinished { .. }) => return Ok(()),
            Err(e) => return Err(e.to_string()),
        },
        Err(_) => runtime
            .start(NewRunBuilder::new("crash-test").id(run_id.clone()).build())
            .await
            .map_err(|e| e.to_string())?,
    };
    for i in 0..calls {
        match handle
            .call(ToolCall::new("append", json!({"i": i})))
            .await
            .map_err(|e| e.to_string())?
        {
            CallStep::Done(_) => {}
            CallStep::Parked(g) => return Err(format!("call {i} parked unexpectedly: {g:?}")),
        }
    }
    handle.finish().await.map_err(|e| e.to_string())?;
    Ok(())
}
