//! The error contract. Every code of every layer is on `docs/errors.md`, and the page
//! lists no code a layer does not have; every API code is answered with the status the
//! page gives it, and the OpenAPI document lists every code. Against a real server: the
//! answers a layer would give bare (a request past the time limit, a path it rejects)
//! come in the envelope with their own codes.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{Debug, Display};
use std::time::Duration;

use common::TestServer;
use serde::Serialize;
use serde_json::json;
use strum::IntoEnumIterator;
use toolshed_agent::AgentCode;
use toolshed_api::ApiCode;
use toolshed_attachments::AttachmentCode;
use toolshed_auth::AuthCode;
use toolshed_core::{AskCode, ErrorCode};
use toolshed_dispatch::DispatchCode;
use toolshed_journal::JournalCode;
use toolshed_mcp::McpCode;
use toolshed_registry::RegistryCode;
use toolshed_runtime::RuntimeCode;
use toolshed_sandbox::SandboxCode;
use toolshed_server::ServerCode;

/// One row of the page: the code and its HTTP cell.
#[derive(Debug)]
struct Row {
    code: String,
    http: String,
}

/// The page's tables, by the name in backticks in each section's heading
/// (`## Registry server answers (`ApiCode`)` → `ApiCode`).
fn page() -> BTreeMap<String, Vec<Row>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut sections: BTreeMap<String, Vec<Row>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            current = heading
                .split_once("(`")
                .and_then(|(_, rest)| rest.split_once('`'))
                .map(|(name, _)| name.to_owned());
            if let Some(name) = &current {
                assert!(
                    !sections.contains_key(name),
                    "two sections for `{name}` on the page"
                );
                sections.insert(name.clone(), Vec::new());
            }
            continue;
        }
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let section = current
            .as_ref()
            .unwrap_or_else(|| panic!("a code row outside a layer's section: {line}"));
        let cells: Vec<&str> = rest.split(" | ").collect();
        assert_eq!(
            cells.len(),
            4,
            "a row has four cells (code, meaning, HTTP, what to do): {line}"
        );
        let code = cells[0].trim_end_matches('`').to_owned();
        assert!(
            !cells[1].trim().is_empty() && !cells[3].trim_end_matches(" |").trim().is_empty(),
            "`{code}` needs a meaning and what to do"
        );
        sections.get_mut(section).unwrap().push(Row {
            code,
            http: cells[2].trim().to_owned(),
        });
    }
    sections
}

/// The codes the page lists in one section, checked to be listed once each.
fn listed(page: &BTreeMap<String, Vec<Row>>, section: &str) -> BTreeSet<String> {
    let rows = page
        .get(section)
        .unwrap_or_else(|| panic!("docs/errors.md has no section for `{section}`"));
    let mut codes = BTreeSet::new();
    for row in rows {
        assert!(
            codes.insert(row.code.clone()),
            "`{}` is listed twice under `{section}`",
            row.code
        );
    }
    codes
}

fn same_codes(section: &str, page: BTreeSet<String>, layer: BTreeSet<String>) {
    let missing: Vec<_> = layer.difference(&page).collect();
    let stale: Vec<_> = page.difference(&layer).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/errors.md, section `{section}`: codes missing from the page {missing:?}; \
         codes the layer does not have {stale:?}"
    );
}

/// A code enum's every variant is on the page under `section`, and nothing else is; its
/// wire form, text form and `as_str` are one name.
fn check_enum<C>(page: &BTreeMap<String, Vec<Row>>, section: &str)
where
    C: IntoEnumIterator + Copy + Into<&'static str> + Serialize + Display + Debug,
{
    let mut codes = BTreeSet::new();
    for code in C::iter() {
        let name: &'static str = code.into();
        assert_eq!(
            serde_json::to_value(code).unwrap(),
            name,
            "{code:?}: serde and strum disagree"
        );
        assert_eq!(
            code.to_string(),
            name,
            "{code:?}: Display and strum disagree"
        );
        assert!(
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
            "{name} is not SCREAMING_SNAKE_CASE"
        );
        codes.insert(name.to_owned());
    }
    same_codes(section, listed(page, section), codes);
}

#[test]
fn every_code_of_every_layer_is_on_the_errors_page() {
    let page = page();
    check_enum::<ApiCode>(&page, "ApiCode");
    check_enum::<ErrorCode>(&page, "ErrorCode");
    check_enum::<DispatchCode>(&page, "DispatchCode");
    check_enum::<RuntimeCode>(&page, "RuntimeCode");
    check_enum::<AuthCode>(&page, "AuthCode");
    check_enum::<AgentCode>(&page, "AgentCode");
    check_enum::<ServerCode>(&page, "ServerCode");
    check_enum::<JournalCode>(&page, "JournalCode");
    check_enum::<RegistryCode>(&page, "RegistryCode");
    check_enum::<SandboxCode>(&page, "SandboxCode");
    check_enum::<McpCode>(&page, "McpCode");
    check_enum::<AttachmentCode>(&page, "AttachmentCode");
    check_enum::<AskCode>(&page, "AskCode");
    let sections: Vec<&String> = page.keys().collect();
    assert_eq!(
        sections.len(),
        13,
        "a section the test does not check: {sections:?}"
    );
}

#[test]
fn every_api_code_has_the_status_the_page_gives_it() {
    let page = page();
    for row in &page["ApiCode"] {
        let code = ApiCode::iter().find(|c| c.as_str() == row.code).unwrap();
        match code.status() {
            Some(status) => assert_eq!(
                row.http,
                status.to_string(),
                "`{}` is answered with {status}; the page says {}",
                row.code,
                row.http
            ),
            None => assert!(
                !row.http.starts_with(|c: char| c.is_ascii_digit()),
                "`{}` keeps the layer's status; the page gives it one: {}",
                row.code,
                row.http
            ),
        }
    }
}

#[test]
fn the_openapi_document_lists_every_code() {
    use utoipa::OpenApi;
    let doc = serde_json::to_value(toolshed_server::ApiDoc::openapi()).unwrap();
    let schemas = &doc["components"]["schemas"];
    let listed = |name: &str| -> Vec<String> {
        schemas[name]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("no enum schema `{name}` in the document"))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let api: Vec<String> = ApiCode::iter().map(|c| c.as_str().to_owned()).collect();
    assert_eq!(listed("ApiCode"), api);
    let tool: Vec<String> = ErrorCode::iter().map(|c| c.as_str().to_owned()).collect();
    assert_eq!(listed("ToolErrorCode"), tool);
    assert_eq!(
        schemas["ErrorBody"]["properties"]["code"]["$ref"],
        "#/components/schemas/ApiCode"
    );
}

#[tokio::test]
async fn a_request_past_the_time_limit_is_request_timeout() {
    let s = TestServer::start_with(|c| c.request_timeout = Duration::from_secs(3)).await;
    let py = s.write(
        "sleepy.py",
        "import time\n\ndef sleepy() -> dict:\n    \"\"\"Sleep past the request limit.\"\"\"\n    time.sleep(120)\n    return {}\n",
    );
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools",
            Some(&s.admin),
            Some(json!({
                "name": "sleepy",
                "description": "Sleeps.",
                "schema_definition": {"type": "object"},
                "endpoint": format!("python:{py}:sleepy"),
                "timeout_ms": 300_000,
            })),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/sleepy/execute",
            Some(&s.deployer),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["error"]["code"], "REQUEST_TIMEOUT", "{answer}");
    assert!(answer["error"]["details"].is_null(), "{answer}");
    s.stop().await;
}

#[tokio::test]
async fn a_path_a_layer_rejects_keeps_its_status_with_its_own_code() {
    let s = TestServer::start().await;
    // `%FF` is not UTF-8: axum's path extractor answers 400 with a text body.
    let (status, answer) = s
        .call("GET", "/api/v1/registry/tools/%FF", Some(&s.viewer), None)
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "REQUEST_REJECTED", "{answer}");
    // The token still comes first.
    let (status, answer) = s
        .call("GET", "/api/v1/registry/tools/%FF", None, None)
        .await;
    assert_eq!(status, 401, "{answer}");
    assert_eq!(answer["error"]["code"], "UNAUTHENTICATED");
    s.stop().await;
}

#[tokio::test]
async fn field_problems_and_violations_have_one_details_shape_each() {
    let s = TestServer::start().await;
    // A field the extractor refuses, a field the registration refuses, and several
    // fields of a definition: all `{"fields": [{"field", "message"}]}`.
    let cases = [
        (
            "/api/v1/auth/login",
            json!({"username": "admin"}),
            vec!["password"],
        ),
        (
            "/api/v1/registry/tools",
            json!({"name": "t", "description": "d", "source": "Not Valid"}),
            vec!["source"],
        ),
        (
            "/api/v1/registry/tools",
            json!({"name": "t", "description": " ", "schema_definition": {"type": "array"}}),
            vec!["description", "schema_definition.type"],
        ),
        (
            "/api/v1/registry/tools/get_current_time/execute",
            json!({"args": [1]}),
            vec!["args"],
        ),
    ];
    for (path, body, fields) in cases {
        let (status, answer) = s.call("POST", path, Some(&s.admin), Some(body)).await;
        assert_eq!(status, 422, "{path}: {answer}");
        assert_eq!(answer["error"]["code"], "INVALID_BODY", "{path}: {answer}");
        let details = &answer["error"]["details"];
        assert_eq!(
            details.as_object().map(|d| d.keys().collect::<Vec<_>>()),
            Some(vec![&"fields".to_owned()]),
            "{path}: {answer}"
        );
        let named: Vec<&str> = details["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                assert!(f["message"].as_str().is_some_and(|m| !m.is_empty()), "{f}");
                f["field"].as_str().unwrap()
            })
            .collect();
        for field in fields {
            assert!(named.contains(&field), "{path}: `{field}` not in {named:?}");
        }
    }
    // Args that do not match the schema: `{"violations": [...]}`, as a tool's own error
    // result has them.
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/get_current_time/execute",
            Some(&s.deployer),
            Some(json!({"args": {"utc_offset": 3}})),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "INVALID_ARGS");
    let violations = answer["error"]["details"]["violations"].as_array().unwrap();
    assert!(!violations.is_empty(), "{answer}");
    for v in violations {
        let keys: BTreeSet<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["pointer", "keyword", "expected", "given"]),
            "{v}"
        );
    }
    assert_eq!(
        answer["error"]["details"].as_object().unwrap().len(),
        1,
        "{answer}"
    );
    s.stop().await;
}

/// `page=0`, `per_page=0`, `per_page=100000` and `limit=0` were silently accepted (and
/// clamped): each is now a 400 naming the parameter and its range, as the document says.
#[tokio::test]
async fn paging_parameters_out_of_range_are_refused_naming_them() {
    let s = TestServer::start().await;
    for (path, name) in [
        ("/api/v1/registry/tools?per_page=0", "per_page"),
        ("/api/v1/registry/tools?per_page=100000", "per_page"),
        ("/api/v1/registry/tools?page=0", "page"),
        ("/api/v1/registry/agents?per_page=501", "per_page"),
        ("/api/v1/tools/sandbox/executions?page=0", "page"),
        ("/api/v1/runs?limit=0", "limit"),
        ("/api/v1/runs?limit=1001", "limit"),
    ] {
        let (status, answer) = s.call("GET", path, Some(&s.admin), None).await;
        assert_eq!(status, 400, "{path}: {answer}");
        assert_eq!(answer["error"]["code"], "INVALID_QUERY", "{path}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("`{name}=")) && message.contains(" to "),
            "{path}: the message names the parameter and its range: {message}"
        );
    }
    // The bounds themselves are accepted.
    for path in [
        "/api/v1/registry/tools?per_page=500&page=1",
        "/api/v1/registry/tools?per_page=1",
        "/api/v1/runs?limit=1000",
    ] {
        let (status, answer) = s.call("GET", path, Some(&s.admin), None).await;
        assert_eq!(status, 200, "{path}: {answer}");
    }
    s.stop().await;
}
