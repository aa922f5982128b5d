//! The API contract, checked on every answer the tests provoke: the answer's status must
//! be one the OpenAPI document lists for that route, and its body must validate against
//! the schema the document gives for that status. This is the "generated client" of the
//! contract: a client generated from the document parses exactly what these schemas
//! accept, so an answer that passes here parses there.
//!
//! An answer to a path no route serves (the router's fallback, 404 or 405) must be an
//! error envelope.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Value, json};

/// The document, and validators compiled on first use per (operation, status).
struct Contract {
    doc: Value,
    validators: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
}

fn contract() -> &'static Contract {
    static CONTRACT: OnceLock<Contract> = OnceLock::new();
    CONTRACT.get_or_init(|| {
        use utoipa::OpenApi;
        let doc = serde_json::to_value(toolshed_server::ApiDoc::openapi())
            .expect("the OpenAPI document serializes");
        Contract {
            doc,
            validators: Mutex::new(HashMap::new()),
        }
    })
}

/// The document's path template that `path` (no query string) is an instance of:
/// segments equal, or a `{param}` segment standing for any one. Where several match, the
/// one with the most literal segments, as the router chooses.
fn template_of<'a>(paths: &'a serde_json::Map<String, Value>, path: &str) -> Option<&'a str> {
    let segments: Vec<&str> = path.split('/').collect();
    paths
        .keys()
        .filter_map(|template| {
            let parts: Vec<&str> = template.split('/').collect();
            if parts.len() != segments.len() {
                return None;
            }
            let mut literal = 0;
            for (part, seg) in parts.iter().zip(&segments) {
                if part.starts_with('{') && part.ends_with('}') {
                    if seg.is_empty() {
                        return None;
                    }
                } else if part == seg {
                    literal += 1;
                } else {
                    return None;
                }
            }
            Some((literal, template.as_str()))
        })
        .max_by_key(|(literal, _)| *literal)
        .map(|(_, t)| t)
}

fn validator(key: String, schema: &Value, components: &Value) -> Arc<jsonschema::Validator> {
    let c = contract();
    let mut cache = c.validators.lock().unwrap_or_else(|e| e.into_inner());
    cache
        .entry(key)
        .or_insert_with_key(|key| {
            // The schema with the document's components beside it, so its
            // `#/components/schemas/…` references resolve.
            let mut root = json!({"$schema": "https://json-schema.org/draft/2020-12/schema"});
            root["allOf"] = json!([schema]);
            root["components"] = components.clone();
            Arc::new(
                jsonschema::options()
                    .with_draft(jsonschema::Draft::Draft202012)
                    .build(&root)
                    .unwrap_or_else(|e| panic!("the document's schema for {key} is invalid: {e}")),
            )
        })
        .clone()
}

/// Check one answer against the document; panics naming the route, status and the
/// first mismatches when it does not conform.
pub fn check(method: &str, path: &str, status: u16, body: &Value) {
    let c = contract();
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let components = &c.doc["components"];
    let Some(paths) = c.doc["paths"].as_object() else {
        panic!("the OpenAPI document has no paths");
    };
    let method_lc = method.to_ascii_lowercase();
    let operation = template_of(paths, path).and_then(|t| {
        let op = &paths[t][method_lc.as_str()];
        op.is_object().then_some((t, op))
    });
    let Some((template, operation)) = operation else {
        // No route: the fallback's 404 or 405, an error envelope.
        assert!(
            status == 404 || status == 405,
            "{method} {path} is not in the OpenAPI document, yet answered {status}: {body}"
        );
        let schema = json!({"$ref": "#/components/schemas/ErrorEnvelope"});
        let v = validator("fallback".into(), &schema, components);
        assert_conforms(&v, method, path, status, body);
        return;
    };
    check_query(method, template, operation, query, status, components);
    let responses = &operation["responses"];
    let response = responses
        .get(status.to_string())
        .or_else(|| responses.get("default"))
        .unwrap_or_else(|| {
            let listed: Vec<&String> = responses
                .as_object()
                .map(|r| r.keys().collect())
                .unwrap_or_default();
            panic!(
                "{method} {template} answered {status}, which the OpenAPI document does not \
                 list (it lists {listed:?}): {body}"
            )
        });
    let Some(schema) = response["content"]["application/json"].get("schema") else {
        panic!("the document gives no JSON schema for {method} {template} {status}");
    };
    let v = validator(format!("{method} {template} {status}"), schema, components);
    assert_conforms(&v, method, template, status, body);
}

/// Every query parameter sent must be one the document lists `in: query`; and where the
/// server accepted the request (2xx), each value must be within the parameter's
/// documented schema: a bound the server does not enforce must not be documented, and
/// one it documents must be enforced.
fn check_query(
    method: &str,
    template: &str,
    operation: &Value,
    query: &str,
    status: u16,
    components: &Value,
) {
    let params = operation["parameters"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, raw) = pair.split_once('=').unwrap_or((pair, ""));
        let Some(param) = params.iter().find(|p| p["name"] == name) else {
            // An unknown parameter must be refused (400), and is not in the document.
            assert_eq!(
                status, 400,
                "{method} {template} accepted the query parameter `{name}`, which the OpenAPI document does not list"
            );
            continue;
        };
        assert_eq!(
            param["in"], "query",
            "{method} {template}: the document lists `{name}` in {} rather than in the query",
            param["in"]
        );
        if !(200..300).contains(&status) {
            continue;
        }
        let schema = &param["schema"];
        let types = match &schema["type"] {
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect::<Vec<_>>(),
            Value::String(t) => vec![t.as_str()],
            _ => vec![],
        };
        let value = if types.contains(&"integer") {
            raw.parse::<i64>()
                .map(Value::from)
                .unwrap_or(Value::from(raw))
        } else if types.contains(&"boolean") {
            raw.parse::<bool>()
                .map(Value::from)
                .unwrap_or(Value::from(raw))
        } else {
            Value::from(raw)
        };
        let v = validator(format!("{method} {template} ?{name}"), schema, components);
        let errors: Vec<String> = v.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(
            errors.is_empty(),
            "{method} {template} accepted `{name}={raw}` ({status}), outside the documented schema: {}",
            errors.join("; ")
        );
    }
}

fn assert_conforms(
    v: &jsonschema::Validator,
    method: &str,
    route: &str,
    status: u16,
    body: &Value,
) {
    let errors: Vec<String> = v
        .iter_errors(body)
        .take(5)
        .map(|e| format!("at `{}`: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "the answer to {method} {route} ({status}) does not match the OpenAPI document:\n  {}\nanswer: {body}",
        errors.join("\n  ")
    );
}

#[test]
fn templates_match_by_segments() {
    let paths = json!({"/a/{id}": {}, "/a/b": {}, "/a/{id}/c": {}});
    let paths = paths.as_object().unwrap();
    assert_eq!(template_of(paths, "/a/b"), Some("/a/b"));
    assert_eq!(template_of(paths, "/a/x"), Some("/a/{id}"));
    assert_eq!(template_of(paths, "/a/x/c"), Some("/a/{id}/c"));
    assert_eq!(template_of(paths, "/a/"), None);
    assert_eq!(template_of(paths, "/b"), None);
}

#[test]
#[should_panic(expected = "does not match the OpenAPI document")]
fn an_answer_off_the_document_is_caught() {
    check(
        "GET",
        "/api/v1/registry/tools/x",
        200,
        &json!({"data": {"name": 3}}),
    );
}

#[test]
#[should_panic(expected = "does not list")]
fn a_status_off_the_document_is_caught() {
    check("GET", "/healthz", 418, &json!({}));
}

#[test]
#[should_panic(expected = "outside the documented schema")]
fn an_accepted_query_value_off_its_bounds_is_caught() {
    check(
        "GET",
        "/api/v1/registry/tools?per_page=100000",
        200,
        &json!({"data": [], "meta": {"page": 1, "per_page": 500, "total": 0}}),
    );
}
