//! The crash-test driver: runs (or resumes) a run of N keyed calls. The handler of call
//! `i` appends `start i KEY` to a ledger file (fsync'd) when it begins, works for
//! `HANDLER_WORK_MS`, appends `end i KEY` when it is about to return, and returns a
//! value computed from its args and key that the test recomputes. `tests/crash.rs`
//! kills it with SIGKILL at chosen and random moments and starts it again until the
//! run completes.
//!
//! Usage: `toolshed-crash-driver URL SCHEMA|- RUN_ID LEDGER CALLS`
//! (SCHEMA is a PostgreSQL schema to use, `-` for none.)

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolshed_core::{Idempotency, Pipeline, Tool, ToolCall, ToolSet};
use toolshed_journal::Journal;
use toolshed_runtime::{CallStep, NewRunBuilder, Runtime, RuntimeConfig, RuntimeError};
use toolshed_testkit::{HANDLER_WORK_MS, MAX_ATTEMPTS};

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

/// Append one line to the ledger and make it durable before going on.
fn append(ledger: &Path, line: &str) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ledger)
        .map_err(|e| format!("cannot open the ledger: {e}"))?;
    f.write_all(line.as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(|e| format!("cannot write the ledger: {e}"))
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
    let ledger: Arc<Path> = Arc::from(Path::new(ledger));
    let work = Tool::builder("work")
        .description("Ledger its start, work a little, ledger its end, return a value of its args.")
        .input_schema(json!({
            "type": "object",
            "properties": {"i": {"type": "integer", "minimum": 0}, "text": {"type": "string"}},
            "required": ["i", "text"]
        }))
        .idempotency(Idempotency::Keyed)
        .max_attempts(MAX_ATTEMPTS)
        .handler(move |args, ctx| {
            let ledger = ledger.clone();
            async move {
                let i = args["i"].as_u64().ok_or("`i` must be a whole number")?;
                let text = args["text"].as_str().ok_or("`text` must be a string")?;
                let key = ctx.idempotency_key().unwrap_or("-").to_owned();
                append(&ledger, &format!("start {i} {key}\n"))?;
                tokio::time::sleep(Duration::from_millis(HANDLER_WORK_MS)).await;
                let result = json!({
                    "i": i,
                    "square": i * i,
                    "shout": text.to_uppercase(),
                    "key": key,
                });
                append(&ledger, &format!("end {i} {key}\n"))?;
                Ok::<_, String>(result)
            }
        })
        .build()
        .map_err(|e| e.to_string())?;
    let pipeline =
        Pipeline::builder(ToolSet::from_tools([work]).map_err(|e| e.to_string())?).build();
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
        let call = ToolCall::new("work", json!({"i": i, "text": format!("call number {i}")}));
        match handle.call(call).await.map_err(|e| e.to_string())? {
            CallStep::Done(_) => {}
            CallStep::Parked(g) => return Err(format!("call {i} parked unexpectedly: {g:?}")),
        }
    }
    handle.finish().await.map_err(|e| e.to_string())?;
    Ok(())
}
