//! bread and Toren tool files run unchanged (issue 12, part 4): the seeds' own examples
//! loaded through the real Node runner in the sandbox, with `@breadai/core` and
//! `@toren-run/core` resolved to our compatibility modules and `zod` to the real zod 4;
//! each one's spec checked, run through the pipeline and the durable runtime (SQLite),
//! and every construct we cannot map refused at load time naming its field.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use toolshed_core::{
    Approval, CredentialError, CredentialProvider, CrumbKind, Effects, ErrorCode, Idempotency,
    MemorySink, RunContext, Secret, Tool, ToolCall,
};
use toolshed_dispatch::compat::WORKER_PREDICATE;
use toolshed_dispatch::{Dispatcher, Endpoint, Mode, Request, SandboxPolicy};
use toolshed_journal::Gate;
use toolshed_runtime::{CallStep, NewRunBuilder, Runtime, RuntimeConfig};

/// A credential provider standing in for the environment or Vault.
#[derive(Debug)]
struct Fixed(BTreeMap<&'static str, &'static str>);

impl CredentialProvider for Fixed {
    fn describe(&self) -> String {
        "test".into()
    }
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, CredentialError>> {
        let r = self.0.get(name).map(|v| Secret::new(*v)).ok_or_else(|| {
            CredentialError::new(ErrorCode::CredentialNotFound, format!("no {name}"))
        });
        Box::pin(std::future::ready(r))
    }
}

async fn load(d: &Dispatcher, file: &str) -> Tool {
    let ep = endpoint("node", &format!("compat/{file}"));
    let inferred = d.infer_schema(&ep).await.unwrap();
    d.tool_from_inferred(ep, inferred, SandboxPolicy::default())
        .unwrap()
}

fn dispatch_code(err: &toolshed_core::ToolError) -> String {
    err.details
        .as_ref()
        .and_then(|d| d.get("dispatch_code"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn tool_code(err: &toolshed_core::ToolError) -> String {
    err.details
        .as_ref()
        .and_then(|d| d.get("tool_code"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn each_seed_example_loads_with_the_spec_it_declares() {
    let d = dispatcher(Mode::OneShot);

    let web = load(&d, "web_search.ts").await;
    let spec = web.spec();
    assert_eq!(spec.name.as_str(), "web_search");
    assert_eq!(
        spec.description,
        "Search the web and return the top results."
    );
    assert_eq!(
        spec.input_schema,
        json!({"type": "object", "properties": {"query": {"type": "string"},
            "limit": {"default": 5, "type": "number", "maximum": 10}}, "required": ["query"]})
    );
    assert_eq!(
        spec.output_schema.as_ref().unwrap()["items"]["required"],
        json!(["title", "url"])
    );
    assert_eq!(spec.credentials, vec!["SEARCH_API_KEY".to_owned()]);
    assert_eq!(spec.retry.attempts, 2);
    assert_eq!(web.hooks().len(), 1, "the onError hook is the tool's own");
    assert!(!spec.streaming && !spec.human);

    let download = load(&d, "download.ts").await;
    assert!(download.spec().streaming);

    let human = load(&d, "approve.ts").await;
    assert_eq!(human.spec().name.as_str(), "approve_publish");
    assert!(human.spec().human);
    assert_eq!(
        human.spec().input_schema["properties"]["url"],
        json!({"type": "string"})
    );

    let tickets = load(&d, "search_tickets.ts").await;
    let spec = tickets.spec();
    assert_eq!(spec.effects, Effects::None);
    assert_eq!(spec.idempotency, Idempotency::Keyed);
    assert!(matches!(spec.approval, Approval::Never));
    assert_eq!(spec.input_schema["properties"]["limit"]["default"], 10);

    let report = load(&d, "fetch_report.ts").await;
    let spec = report.spec();
    assert_eq!(spec.effects, Effects::External);
    assert_eq!(spec.idempotency, Idempotency::Keyed);
    assert_eq!(spec.approval.describe(), WORKER_PREDICATE);
    assert_eq!(spec.timeout, Some(Duration::from_millis(30_000)));
    assert_eq!(spec.max_attempts, Some(2));
}

#[tokio::test]
async fn web_search_reads_its_credential_and_its_on_error_hook_recovers() {
    let d = dispatcher(Mode::Pool);
    let p = pipeline(vec![load(&d, "web_search.ts").await]);
    let sink = Arc::new(MemorySink::new());
    p.crumbs().add_sink(sink.clone());
    let run = RunContext::builder()
        .credentials(Arc::new(Fixed(BTreeMap::from([(
            "SEARCH_API_KEY",
            "sk-search-123",
        )]))))
        .build();

    let out = p
        .call(
            &run,
            ToolCall::new("web_search", json!({"query": "rust", "limit": 2})),
        )
        .await;
    let results = out.result.unwrap();
    assert_eq!(results.as_array().unwrap().len(), 2, "{results}");
    assert_eq!(results[0]["title"], "rust #1 (key 13 chars)");

    // The default from the zod schema applies (limit 5, capped at 3 by the fake API).
    let out = p
        .call(&run, ToolCall::new("web_search", json!({"query": "zod"})))
        .await;
    assert_eq!(out.result.unwrap().as_array().unwrap().len(), 3);

    // execute throws; the onError hook, run in the tool's worker, recovers with [].
    let out = p
        .call(&run, ToolCall::new("web_search", json!({"query": "fail"})))
        .await;
    assert_eq!(out.result.unwrap(), json!([]));
    assert_eq!(out.attempts, 1, "a recovery is not a retry");

    // The recovered failure emitted no tool:error.
    let kinds = sink.kinds();
    assert!(!kinds.contains(&CrumbKind::Error), "{kinds:?}");

    // Bad args never reach the tool: the schema zod gave says `limit` is at most 10.
    let out = p
        .call(
            &run,
            ToolCall::new("web_search", json!({"query": "x", "limit": 50})),
        )
        .await;
    assert_eq!(out.result.unwrap_err().code, ErrorCode::InvalidArgs);
    assert!(
        sink.crumbs()
            .iter()
            .all(|c| !format!("{c:?}").contains("sk-search-123"))
    );
}

#[tokio::test]
async fn a_credential_the_tool_did_not_declare_is_refused() {
    let d = dispatcher(Mode::OneShot);
    let p = pipeline(vec![load(&d, "leaky.ts").await]);
    let run = RunContext::builder()
        .credentials(Arc::new(Fixed(BTreeMap::from([
            ("DECLARED_KEY", "declared-value"),
            ("OTHER_KEY", "other-secret-value"),
        ]))))
        .build();
    let out = p
        .call(
            &run,
            ToolCall::new("leaky", json!({"which": "DECLARED_KEY"})),
        )
        .await;
    assert_eq!(out.result.unwrap(), json!({"length": 14}));

    let out = p
        .call(&run, ToolCall::new("leaky", json!({"which": "OTHER_KEY"})))
        .await;
    let err = out.result.unwrap_err();
    assert_eq!(tool_code(&err), "CREDENTIAL_NOT_DECLARED", "{err}");
    assert!(
        err.message
            .contains("credential `OTHER_KEY` is not declared by tool `leaky`"),
        "{err}"
    );
    assert!(!err.message.contains("other-secret-value"));
}

#[tokio::test]
async fn a_streaming_execute_yields_partial_results() {
    let d = dispatcher(Mode::Pool);
    let ep = endpoint("node", "compat/download.ts");
    let run = d
        .execute(
            &ep,
            Request::new("download", json!({"url": "https://example.com/a"})),
        )
        .await;
    assert_eq!(
        run.partials,
        vec![
            json!({"status": "started"}),
            json!({"status": "downloaded", "bytes": 21}),
            json!({"status": "done", "body": "contents of https://example.com/a"})
        ],
        "every yield is a partial, the last one the result too"
    );
    assert_eq!(
        run.result.unwrap(),
        json!({"status": "done", "body": "contents of https://example.com/a"})
    );

    // Through the pipeline: each yield is a tool:result:partial crumb (bread's rule).
    let p = pipeline(vec![load(&d, "download.ts").await]);
    let sink = Arc::new(MemorySink::new());
    p.crumbs().add_sink(sink.clone());
    let out = p
        .call(
            &RunContext::ephemeral(),
            ToolCall::new("download", json!({"url": "u"})),
        )
        .await;
    assert_eq!(out.result.unwrap()["status"], "done");
    let partials = sink
        .kinds()
        .into_iter()
        .filter(|k| *k == CrumbKind::Partial)
        .count();
    assert_eq!(partials, 3);
}

#[tokio::test]
async fn toren_handlers_get_the_declared_env_as_ctx_env() {
    let d = dispatcher(Mode::Pool);
    let p = pipeline(vec![load(&d, "search_tickets.ts").await]);
    let run = RunContext::builder()
        .env(BTreeMap::from([(
            "TICKETS_API_KEY".to_owned(),
            "tk-1".to_owned(),
        )]))
        .build();
    let out = p
        .call(
            &run,
            ToolCall::new("search_tickets", json!({"query": "login"})),
        )
        .await;
    let text = out.result.unwrap();
    let v: Value = serde_json::from_str(text.as_str().unwrap()).unwrap();
    assert_eq!(v["key_seen"], true);
    assert_eq!(v["tickets"][0]["title"], "login is broken");

    let out = p
        .call(
            &RunContext::ephemeral(),
            ToolCall::new("search_tickets", json!({"query": "login"})),
        )
        .await;
    let v: Value = serde_json::from_str(out.result.unwrap().as_str().unwrap()).unwrap();
    assert_eq!(v["key_seen"], false, "no declared env, no ctx.env value");
}

async fn runtime(tools: Vec<Tool>) -> (Runtime, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("journal.db").display());
    let journal = toolshed_journal::open(&url).await.unwrap();
    let rt = Runtime::new(pipeline(tools), journal, RuntimeConfig::default()).unwrap();
    (rt, dir)
}

#[tokio::test]
async fn the_approval_predicate_runs_in_the_tools_worker_and_parks_only_big_calls() {
    let d = dispatcher(Mode::Pool);
    let (rt, _dir) = runtime(vec![load(&d, "fetch_report.ts").await]).await;
    let run = rt
        .start(NewRunBuilder::new("finance").build())
        .await
        .unwrap();

    let small = ToolCall::new("fetch_report", json!({"report": "q1", "amount": 5}));
    let CallStep::Done(out) = run.call(small).await.unwrap() else {
        panic!("a call of 5 must not park");
    };
    let small: Value = serde_json::from_str(out.result.unwrap().as_str().unwrap()).unwrap();
    assert_eq!(small["amount"], 5);

    let big = ToolCall::new("fetch_report", json!({"report": "q2", "amount": 500}));
    let CallStep::Parked(gate) = run.call(big.clone()).await.unwrap() else {
        panic!("a call of 500 must park");
    };
    let Gate::Approval { reason, .. } = &gate.gate else {
        panic!("{:?}", gate.gate);
    };
    assert_eq!(reason, WORKER_PREDICATE);
    // The predicate and the call ran in the tool's one warm worker.
    let stats = d.pool_stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    assert_eq!(stats[0].started, 1, "{stats:?}");
    let run_id = run.id().to_owned();
    run.finish().await.unwrap();

    toolshed_runtime::approve(rt.journal().as_ref(), &gate.call_id, "alice", None)
        .await
        .unwrap();
    let resumed = rt.resume(&run_id).await.unwrap();
    let small = ToolCall::new("fetch_report", json!({"report": "q1", "amount": 5}));
    let CallStep::Done(_) = resumed.call(small).await.unwrap() else {
        panic!("replayed");
    };
    let CallStep::Done(out) = resumed.call(big).await.unwrap() else {
        panic!("an approved call runs");
    };
    let v: Value = serde_json::from_str(out.result.unwrap().as_str().unwrap()).unwrap();
    assert_eq!(v["amount"], 500);
    resumed.finish().await.unwrap();
}

#[tokio::test]
async fn a_predicate_that_throws_fails_the_call_instead_of_skipping_the_gate() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gated.mjs");
    std::fs::write(
        &file,
        r#"import { defineTool } from '@toren-run/core';
import { z } from 'zod';
export default defineTool({
  name: 'gated', description: 'x', input: z.object({ n: z.number() }),
  approval: (args) => { if (args.n < 0) throw new Error('negative'); return args.n > 1 ? 'yes' : false; },
  handler: async () => 'ran',
});
"#,
    )
    .unwrap();
    let d = dispatcher(Mode::OneShot);
    let ep = Endpoint::parse(&format!("node:{}", file.display())).unwrap();
    let inferred = d.infer_schema(&ep).await.unwrap();
    let tool = d
        .tool_from_inferred(ep, inferred, SandboxPolicy::default())
        .unwrap();
    let (rt, _db) = runtime(vec![tool]).await;
    let run = rt.start(NewRunBuilder::new("a").build()).await.unwrap();
    for (n, what) in [(-1, "negative"), (5, "not a boolean")] {
        let CallStep::Done(out) = run
            .call(ToolCall::new("gated", json!({"n": n})))
            .await
            .unwrap()
        else {
            panic!("a failing predicate must not park");
        };
        let err = out.result.unwrap_err();
        assert_eq!(err.code, ErrorCode::ApprovalPredicateError, "{err}");
        assert!(err.message.contains(what), "{err}");
    }
    let CallStep::Done(out) = run
        .call(ToolCall::new("gated", json!({"n": 0})))
        .await
        .unwrap()
    else {
        panic!("false means no gate");
    };
    assert_eq!(out.result.unwrap(), json!("ran"));
}

#[tokio::test]
async fn a_human_tool_parks_the_run_until_a_person_answers() {
    let d = dispatcher(Mode::OneShot);
    let (rt, _dir) = runtime(vec![load(&d, "approve.ts").await]).await;
    let run = rt
        .start(NewRunBuilder::new("publisher").build())
        .await
        .unwrap();
    let ask = ToolCall::new(
        "approve_publish",
        json!({"url": "https://example.com/post"}),
    );
    let CallStep::Parked(gate) = run.call(ask.clone()).await.unwrap() else {
        panic!("a human tool parks");
    };
    assert!(matches!(gate.gate, Gate::Answer { .. }), "{:?}", gate.gate);
    let run_id = run.id().to_owned();
    run.finish().await.unwrap();
    toolshed_runtime::answer(
        rt.journal().as_ref(),
        &gate.call_id,
        json!({"approved": true}),
        "editor",
    )
    .await
    .unwrap();
    let resumed = rt.resume(&run_id).await.unwrap();
    let CallStep::Done(out) = resumed.call(ask).await.unwrap() else {
        panic!("answered");
    };
    assert_eq!(out.result.unwrap(), json!({"approved": true}));
}

#[tokio::test]
async fn a_module_level_schema_export_is_read() {
    let d = dispatcher(Mode::OneShot);
    let ep = endpoint("node", "compat/schema_upper.mjs");
    let inferred = d.infer_schema(&ep).await.unwrap();
    assert_eq!(inferred.name, "shout_upper");
    assert_eq!(inferred.description, "Upper-case a text.");
    assert_eq!(inferred.input_schema["required"], json!(["text"]));
    assert!(inferred.compat.is_none());
    let run = d
        .execute(&ep, Request::new("shout_upper", json!({"text": "hi"})))
        .await;
    assert_eq!(run.result.unwrap(), json!("HI"));
}

#[tokio::test]
async fn every_construct_we_cannot_map_is_a_load_time_error_naming_its_field() {
    let bread = "import { defineTool, defineHumanTool, vaultProvider } from '@breadai/core';\nimport { z } from 'zod';\n";
    let toren = "import { defineTool } from '@toren-run/core';\nimport { z } from 'zod';\n";
    let ok_bread = "name: 't', description: 'd', schema: z.object({ q: z.string() }), async execute() { return 1 }";
    let ok_toren =
        "name: 't', description: 'd', input: z.object({ q: z.string() }), handler: async () => 'x'";
    let cases: Vec<(String, &str)> = vec![
        (
            format!(
                "{bread}export default defineTool({{ {ok_bread}, credentialProvider: {{}} }});"
            ),
            "`credentialProvider` cannot be mapped",
        ),
        (
            format!("{bread}export const p = vaultProvider({{ address: 'x', token: 'y' }});"),
            "`vaultProvider` cannot be mapped",
        ),
        (
            format!("{bread}export default defineTool({{ {ok_bread}, cache: true }});"),
            "`cache` cannot be mapped",
        ),
        (
            format!(
                "{bread}export default defineTool({{ {ok_bread}, hooks: {{ onSuccess: () => 1 }} }});"
            ),
            "`hooks.onSuccess` cannot be mapped",
        ),
        (
            format!(
                "{bread}export default defineTool({{ {ok_bread}, errorHandling: {{ retry: {{ attempts: 2, backoff: 'exp' }} }} }});"
            ),
            "`errorHandling.retry.backoff` cannot be mapped",
        ),
        (
            format!(
                "{bread}export default defineTool({{ name: 't', schema: z.object({{ when: z.date() }}), async execute() {{}} }});"
            ),
            "`schema` cannot be expressed as JSON Schema",
        ),
        (
            format!(
                "{bread}export default defineTool({{ {ok_bread}, outputSchema: z.string().transform((s) => s.length) }});"
            ),
            "`outputSchema` cannot be expressed as JSON Schema",
        ),
        (
            format!(
                "{bread}export default defineTool({{ name: 't', schema: z.string(), async execute() {{}} }});"
            ),
            "`schema` must describe an object",
        ),
        (
            format!("{bread}export default defineTool({{ name: 't', schema: z.object({{}}) }});"),
            "`execute` is missing",
        ),
        (
            format!("{bread}export default defineHumanTool('bad name', z.object({{}}));"),
            "`name` must be a string",
        ),
        (
            format!("{toren}export default defineTool({{ {ok_toren}, approval: 'sometimes' }});"),
            "`approval` must be \"never\", \"always\" or a predicate",
        ),
        (
            format!("{toren}export default defineTool({{ {ok_toren}, effects: 'network' }});"),
            "`effects` is \"network\"",
        ),
        (
            format!("{toren}export default defineTool({{ {ok_toren}, idempotency: 'once' }});"),
            "`idempotency` is \"once\"",
        ),
        (
            format!("{toren}export default defineTool({{ {ok_toren}, timeoutMs: -5 }});"),
            "`timeoutMs` must be a whole number",
        ),
        (
            format!(
                "{toren}export default defineTool({{ name: 't', input: z.object({{}}), execute: async () => 'x' }});"
            ),
            "`execute` is not a Toren field",
        ),
    ];
    let d = dispatcher(Mode::OneShot);
    let dir = tempfile::tempdir().unwrap();
    for (i, (source, expected)) in cases.iter().enumerate() {
        let file = dir.path().join(format!("case{i}.mjs"));
        std::fs::write(&file, source).unwrap();
        let ep = Endpoint::parse(&format!("node:{}", file.display())).unwrap();
        let err = d.infer_schema(&ep).await.unwrap_err();
        assert_eq!(
            err.code().as_str(),
            "COMPAT_UNMAPPABLE",
            "case {i}: {source}\n{err}"
        );
        assert!(
            err.to_string().contains(expected),
            "case {i}: expected `{expected}` in: {err}"
        );
    }
    // A schema-less plain module is still SCHEMA_NOT_FOUND, naming both conventions.
    let file = dir.path().join("plain.mjs");
    std::fs::write(&file, "export default function plain() { return 1 }\n").unwrap();
    let ep = Endpoint::parse(&format!("node:{}", file.display())).unwrap();
    let err = d.infer_schema(&ep).await.unwrap_err();
    assert_eq!(err.code().as_str(), "SCHEMA_NOT_FOUND");
    assert!(err.to_string().contains("export const SCHEMA"), "{err}");
    let _ = dispatch_code;
}

#[tokio::test]
async fn bread_hooks_run_in_the_hook_chain_with_every_decision() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hooked.mjs");
    std::fs::write(
        &file,
        r#"import { defineTool } from '@breadai/core';
import { z } from 'zod';
export default defineTool({
  name: 'hooked', description: 'x', schema: z.object({ n: z.number() }),
  errorHandling: { retry: { attempts: 1 } },
  hooks: {
    beforeRun: ({ args }) => {
      if (args.n === 0) return { action: 'shortCircuit', output: 'cached' };
      if (args.n === 1) return { args: { n: 2 } };
      if (args.n === 9) throw new Error('no nines');
    },
    afterRun: ({ args, result }) =>
      result > 100 ? { action: 'replace', output: 100 + args.n } : undefined,
    onError: ({ args, error, attempt }) =>
      error.message.includes('flaky') && attempt === 1
        ? { action: 'retry' }
        : { action: 'fail', error: new Error(`gave up on ${args.n}: ${error.message}`) },
  },
  async execute({ n }) {
    if (n === 7) throw new Error('flaky');
    if (n === 8) throw new Error('broken');
    return n * 10;
  },
});
"#,
    )
    .unwrap();
    let d = dispatcher(Mode::Pool);
    let ep = Endpoint::parse(&format!("node:{}", file.display())).unwrap();
    let inferred = d.infer_schema(&ep).await.unwrap();
    let p = pipeline(vec![
        d.tool_from_inferred(ep, inferred, SandboxPolicy::default())
            .unwrap(),
    ]);
    let run = RunContext::ephemeral();
    let call = |n: i64| p.call(&run, ToolCall::new("hooked", json!({ "n": n })));

    let out = call(0).await;
    assert_eq!(out.result.unwrap(), json!("cached"));
    assert_eq!(out.attempts, 0, "a short-circuit runs no execute");
    assert_eq!(call(1).await.result.unwrap(), json!(20), "args replaced");
    assert_eq!(call(3).await.result.unwrap(), json!(30));
    assert_eq!(
        call(20).await.result.unwrap(),
        json!(120),
        "result replaced, by a hook that read the args"
    );

    let err = call(9).await.result.unwrap_err();
    assert!(err.message.contains("beforeRun hook"), "{err}");
    assert!(err.message.contains("no nines"), "{err}");

    let out = call(7).await;
    assert_eq!(out.attempts, 2, "one retry asked by onError");
    let err = out.result.unwrap_err();
    assert!(err.message.contains("gave up on 7: Error: flaky"), "{err}");

    let out = call(8).await;
    assert_eq!(out.attempts, 1);
    assert!(
        out.result
            .unwrap_err()
            .message
            .contains("gave up on 8: Error: broken")
    );
}
