//! A local HTTP server that speaks Tavily's documented search API (`POST /search`,
//! `Authorization: Bearer …`, the JSON body and the `results[]` answer), standing in for
//! the paid Tavily API, which a test cannot call: it checks every request it gets and
//! answers in Tavily's shapes, errors included. Shared by the tests of `web_search`
//! (`toolshed-stdlib`), of the CLI and of the server (`#[path]` includes).
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// The one key the stand-in accepts.
pub const KEY: &str = "tvly-test-0123456789abcdef";

/// One request as the stand-in saw it: its `Authorization` header and its body.
pub type Request = (Option<String>, Value);

#[derive(Clone, Default)]
pub struct Seen(pub Arc<Mutex<Vec<Request>>>);

/// The stand-in for Tavily: answers by the query's text, and records every request.
async fn tavily(State(seen): State<Seen>, headers: HeaderMap, body: String) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    seen.0.lock().unwrap().push((auth.clone(), body.clone()));
    if auth.as_deref() != Some(&format!("Bearer {KEY}")) {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"detail": {"error": format!("Unauthorized: missing or invalid API key {}", auth.unwrap_or_default())}})),
        )
            .into_response();
    }
    match body["query"].as_str().unwrap_or("") {
        "rate" => (
            StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "7")],
            axum::Json(json!({"detail": {"error": "Your request has been blocked due to excessive requests."}})),
        )
            .into_response(),
        "down" => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"detail": {"error": "Internal Server Error"}})),
        )
            .into_response(),
        "quota" => (
            StatusCode::from_u16(432).unwrap(),
            axum::Json(json!({"detail": {"error": "This request exceeds your plan's set usage limit."}})),
        )
            .into_response(),
        "garbage" => (StatusCode::OK, "<html>not json</html>").into_response(),
        query => axum::Json(json!({
            "query": query,
            "answer": null,
            "images": [],
            "results": [
                {"title": "Lionel Messi Facts | Britannica", "url": "https://www.britannica.com/facts/Lionel-Messi",
                 "content": "Lionel Messi, an Argentine footballer…", "score": 0.81025416, "raw_content": null},
                {"title": "Messi - Wikipedia", "url": "https://en.wikipedia.org/wiki/Lionel_Messi",
                 "content": "Lionel Andrés Messi is an Argentine professional footballer…", "score": 0.7, "raw_content": null,
                 "favicon": "https://en.wikipedia.org/favicon.ico"}
            ],
            "response_time": "1.67",
            "request_id": "123e4567-e89b-12d3-a456-426614174111"
        }))
        .into_response(),
    }
}

pub async fn stand_in() -> (String, Seen) {
    let seen = Seen::default();
    let app = axum::Router::new()
        .route("/search", post(tavily))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), seen)
}
