//! An agent folder whose tools folder holds bread and Toren tool files as their
//! manuals write them: loaded through the dispatch layer (the real Node runner, in the
//! sandbox), their specs mapped, and one that cannot be mapped refused at start-up
//! naming the file and the field.
#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};
use toolshed_agent::{DispatchImplementations, load_agent};
use toolshed_core::{Effects, Idempotency, Pipeline, RunContext, ToolCall};
use toolshed_dispatch::{Dispatcher, DispatcherConfig};

const WEB_SEARCH: &str =
    include_str!("../../toolshed-dispatch/tests/fixtures/compat/web_search.ts");
const SEARCH_TICKETS: &str =
    include_str!("../../toolshed-dispatch/tests/fixtures/compat/search_tickets.ts");
const FETCH_REPORT: &str =
    include_str!("../../toolshed-dispatch/tests/fixtures/compat/fetch_report.ts");
const APPROVE: &str = include_str!("../../toolshed-dispatch/tests/fixtures/compat/approve.ts");

fn project(agent_yaml: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("agent.yaml"), agent_yaml).unwrap();
    for (name, text) in files {
        let p = dir.path().join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

fn implementations(cache: &std::path::Path, project: &std::path::Path) -> DispatchImplementations {
    DispatchImplementations::new(Dispatcher::new(DispatcherConfig {
        cache_dir: cache.to_path_buf(),
        // toolshed's Node helper package (zod 4), as scripts/test installs it.
        node_deps: Some(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../toolshed-dispatch/node"),
        ),
        ..Default::default()
    }))
    .with_project(project)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bread_and_toren_files_in_the_tools_folder_load_and_run() {
    let dir = project(
        "name: support-agent\nframework: custom\nenv: [TICKETS_API_KEY]\n",
        &[
            ("tools/web-search.ts", WEB_SEARCH),
            ("tools/search-tickets.ts", SEARCH_TICKETS),
            ("tools/fetch-report.ts", FETCH_REPORT),
            ("tools/approve.ts", APPROVE),
        ],
    );
    let cache = tempfile::tempdir().unwrap();
    let imps = implementations(cache.path(), dir.path());
    let env = |name: &str| (name == "TICKETS_API_KEY").then(|| "tk-1".to_owned());
    let a = load_agent(dir.path(), &imps, None, &env).await.unwrap();
    assert_eq!(a.origins["web_search"], "tools/web-search.ts");
    assert_eq!(a.origins["search_tickets"], "tools/search-tickets.ts");
    assert_eq!(a.origins["approve_publish"], "tools/approve.ts");
    let web = a.toolset.get("web_search").unwrap();
    assert_eq!(web.spec().credentials, vec!["SEARCH_API_KEY".to_owned()]);
    assert!(a.toolset.get("approve_publish").unwrap().spec().human);
    let report = a.toolset.get("fetch_report").unwrap().spec().clone();
    assert_eq!(report.effects, Effects::External);
    assert_eq!(report.idempotency, Idempotency::Keyed);
    assert_eq!(report.max_attempts, Some(2));

    // The declared env reaches the Toren handler as ctx.env.
    let run = RunContext::builder().env(a.env.clone()).build();
    let out = Pipeline::builder(a.toolset.clone())
        .build()
        .call(
            &run,
            ToolCall::new("search_tickets", json!({"query": "vpn"})),
        )
        .await;
    let v: Value = serde_json::from_str(out.result.unwrap().as_str().unwrap()).unwrap();
    assert_eq!(v["key_seen"], true);
    assert_eq!(v["tickets"][0]["title"], "vpn is broken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmappable_tool_file_stops_the_agent_naming_the_file_and_field() {
    let bad = "import { defineTool, vaultProvider } from '@breadai/core'\nimport { z } from 'zod'\n\
        export default defineTool({ name: 'vaulted', description: 'x', schema: z.object({}),\n\
        credentials: ['K'], credentialProvider: {}, async execute() { return 1 } })\n";
    let dir = project(
        "name: a\nframework: custom\n",
        &[
            ("tools/vaulted.ts", bad),
            ("tools/search-tickets.ts", SEARCH_TICKETS),
        ],
    );
    let cache = tempfile::tempdir().unwrap();
    let imps = implementations(cache.path(), dir.path());
    let err = load_agent(dir.path(), &imps, None, &|_| None)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("tools/vaulted.ts"), "{text}");
    assert!(
        text.contains("`credentialProvider` cannot be mapped"),
        "{text}"
    );
    assert!(!text.contains("search-tickets"), "{text}");
}
