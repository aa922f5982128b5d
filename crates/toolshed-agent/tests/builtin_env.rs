//! `builtin_tools` folds each built-in's required env into the agent's declared env:
//! a missing one is in the start-up list with the agent's own, and the values reach
//! the handler as `ctx.env`.
#![allow(clippy::unwrap_used)]

mod common;
use common::Builtins;

use std::collections::BTreeMap;

use toolshed_agent::{AgentError, load_agent};

fn project(agent_yaml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("agent.yaml"), agent_yaml).unwrap();
    dir
}

#[tokio::test]
async fn missing_builtin_env_is_listed_with_the_agents_own() {
    let dir = project("name: a\nenv: [OWN_TOKEN]\nbuiltin_tools: [web_search, sql_query]\n");
    let e = load_agent(dir.path(), &Builtins, None, &|_| None)
        .await
        .unwrap_err();
    let AgentError::MissingEnv { missing, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!(
        missing.missing,
        ["OWN_TOKEN", "SQL_DATABASE_URL", "TAVILY_API_KEY"]
    );
    assert!(e.to_string().contains("TAVILY_API_KEY"), "{e}");
}

#[tokio::test]
async fn web_dash_search_is_web_search_and_its_env_reaches_the_run() {
    let dir = project("name: a\nbuiltin_tools: [web-search]\n");
    let vars = BTreeMap::from([
        ("TAVILY_API_KEY", "tvly-x"),
        ("TAVILY_BASE_URL", "http://127.0.0.1:9"),
        ("UNRELATED", "no"),
    ]);
    let lookup = |name: &str| vars.get(name).map(|v| (*v).to_owned());
    let a = load_agent(dir.path(), &Builtins, None, &lookup)
        .await
        .unwrap();
    let names: Vec<&str> = a.toolset.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["web_search"]);
    assert_eq!(
        a.env.get("TAVILY_API_KEY").map(String::as_str),
        Some("tvly-x")
    );
    // The optional base URL is passed on when set; nothing undeclared is.
    assert_eq!(
        a.env.get("TAVILY_BASE_URL").map(String::as_str),
        Some("http://127.0.0.1:9")
    );
    assert!(!a.env.contains_key("UNRELATED"));
    // Without the optional one, the agent still starts.
    let a = load_agent(dir.path(), &Builtins, None, &|n: &str| {
        (n == "TAVILY_API_KEY").then(|| "k".to_owned())
    })
    .await
    .unwrap();
    assert!(!a.env.contains_key("TAVILY_BASE_URL"));
}

#[tokio::test]
async fn a_builtin_colliding_with_an_own_tool_is_a_start_up_error() {
    let dir = project(
        "name: a\ntools:\n  - name: web_search\n    description: Mine.\n    endpoint: builtin:get_current_time\nbuiltin_tools: [web-search]\n",
    );
    let e = load_agent(dir.path(), &Builtins, None, &|_| Some("x".into()))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("collides"), "{e}");
    assert!(e.contains("rename your tool"), "{e}");
}
