//! `web_search` (AgentBreeder's `web-search`): live web search through Tavily's search
//! API.
//!
//! The request is Tavily's documented `POST {base}/search` with a JSON body (`query`,
//! `max_results`, `topic`, `time_range`, `include_domains`, `exclude_domains`) and
//! `Authorization: Bearer $TAVILY_API_KEY`; the answer's `results[]` keep `title`,
//! `url`, `content` and `score`. Tavily's error answers become error results the model
//! can act on: `details.kind` (`unauthorized`, `rate_limited`, `quota_exceeded`,
//! `unavailable`, …), `details.retryable`, and `details.retry_after_seconds` from a
//! 429's or 5xx's `Retry-After`.
//!
//! Configuration comes from the run's declared env (`ctx.env`), never the process
//! environment: `TAVILY_API_KEY` (required; folded into an agent's declared env by
//! `builtin_tools`) and `TAVILY_BASE_URL` (optional, default `https://api.tavily.com`).
//! The base URL is the operator's setting, not the model's, so it is not put through
//! the SSRF guard of HTTP tools; it must be `https://`, or `http://` to a loopback
//! address (a local stand-in or proxy), so the key never crosses a network in clear.
//! Redirects are never followed (the key must not be replayed to another host).

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolshed_core::{
    Effects, Idempotency, Reply, Tool, ToolContext, ToolError, ToolMeta, ToolOutput,
};

use crate::common::{clip, failure, output, schema_of, scrub};

/// The tool's name.
pub const WEB_SEARCH: &str = "web_search";
/// AgentBreeder's stdlib name for the same tool.
pub const WEB_SEARCH_ALIAS: &str = "web-search";
/// The env var holding the Tavily API key (required).
pub const TAVILY_API_KEY_ENV: &str = "TAVILY_API_KEY";
/// The env var overriding the API's base URL (optional).
pub const TAVILY_BASE_URL_ENV: &str = "TAVILY_BASE_URL";
/// Tavily's API, used when `TAVILY_BASE_URL` is not declared.
pub const DEFAULT_TAVILY_BASE_URL: &str = "https://api.tavily.com";
/// The most results one call asks for (Tavily's own ceiling).
pub const MAX_RESULTS: u32 = 20;
/// The largest answer read from the API, in bytes; a longer one is an error.
pub const MAX_ANSWER_BYTES: usize = 2 * 1024 * 1024;
/// The most domains one call may include or exclude (Tavily accepts up to 300/150).
pub const MAX_DOMAINS: usize = 150;

/// What the search covers (Tavily's `topic`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Topic {
    /// Anything.
    #[default]
    General,
    /// Recent news from mainstream sources.
    News,
    /// Finance.
    Finance,
}

/// How far back results may reach (Tavily's `time_range`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TimeRange {
    /// The last day.
    Day,
    /// The last week.
    Week,
    /// The last month.
    Month,
    /// The last year.
    Year,
}

/// The arguments of `web_search`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebSearchArgs {
    /// What to search for, in plain words.
    #[schemars(length(min = 1, max = 2000))]
    pub query: String,
    /// How many results to return, 1 to 20.
    #[serde(default = "default_max_results")]
    #[schemars(range(min = 1, max = 20))]
    pub max_results: u32,
    /// `general` (default), `news` or `finance`.
    #[serde(default)]
    pub topic: Topic,
    /// Only results from the last `day`, `week`, `month` or `year`.
    #[serde(default)]
    pub time_range: Option<TimeRange>,
    /// Only results from these domains, e.g. `["nasa.gov"]`.
    #[serde(default)]
    #[schemars(length(max = 150))]
    pub include_domains: Vec<String>,
    /// No results from these domains.
    #[serde(default)]
    #[schemars(length(max = 150))]
    pub exclude_domains: Vec<String>,
}

fn default_max_results() -> u32 {
    5
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchResult {
    /// The page's title.
    pub title: String,
    /// The page's address.
    pub url: String,
    /// The part of the page relevant to the query.
    pub content: String,
    /// Relevance, 0 to 1, higher first.
    pub score: f64,
}

/// The answer of `web_search`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct WebSearchAnswer {
    /// The query as searched.
    pub query: String,
    /// The results, most relevant first.
    pub results: Vec<SearchResult>,
}

/// The `web_search` tool (also found as `web-search` by [`crate::get`]).
pub fn web_search_tool() -> Tool {
    static TOOL: OnceLock<Tool> = OnceLock::new();
    TOOL.get_or_init(|| {
        Tool::builder(WEB_SEARCH)
            .description(
                "Search the web (Tavily) and return the most relevant pages, each with its title, \
                 url, the relevant content and a score. Use for current facts and sources. \
                 Narrow with topic (general, news, finance), time_range (day, week, month, year) \
                 and include_domains / exclude_domains.",
            )
            .input_schema(schema_of::<WebSearchArgs>())
            .output_schema(schema_of::<WebSearchAnswer>())
            .effects(Effects::None)
            .idempotency(Idempotency::None)
            .timeout(Duration::from_secs(30))
            .meta(ToolMeta {
                version: Some("1.0.0".into()),
                tags: vec!["stdlib".into(), "web".into(), "read-only".into()],
                tool_type: Some("function".into()),
                network_access: true,
                ..ToolMeta::default()
            })
            .raw_handler(Arc::new(|args: Value, ctx: ToolContext| {
                Box::pin(async move { Reply::new(handle(args, &ctx).await) })
                    as toolshed_core::HandlerFuture
            }))
            .build()
            // The spec above is fixed and checked by this crate's tests.
            .unwrap_or_else(|e| panic!("the web_search spec is invalid: {e}"))
    })
    .clone()
}

async fn handle(args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
    let args: WebSearchArgs = serde_json::from_value(args).map_err(|e| {
        ToolError::new(
            toolshed_core::ErrorCode::InvalidArgs,
            format!("web_search arguments: {e}"),
        )
    })?;
    let key = ctx.env(TAVILY_API_KEY_ENV).unwrap_or_default().to_owned();
    let base = ctx.env(TAVILY_BASE_URL_ENV).map(str::to_owned);
    output(&search(&key, base.as_deref(), &args).await?)
}

/// Run one search against Tavily at `base_url` (default [`DEFAULT_TAVILY_BASE_URL`])
/// with `api_key`: what the tool's handler does once it has read its env.
pub async fn search(
    api_key: &str,
    base_url: Option<&str>,
    args: &WebSearchArgs,
) -> Result<WebSearchAnswer, ToolError> {
    let secrets = [api_key];
    if api_key.trim().is_empty() {
        return Err(failure(
            "not_configured",
            format!(
                "web_search needs {TAVILY_API_KEY_ENV}: declare it in the agent's env (listing \
                 web_search in builtin_tools does) and set it before starting"
            ),
            false,
            None,
            &secrets,
        ));
    }
    let url = search_url(base_url.unwrap_or(DEFAULT_TAVILY_BASE_URL))
        .map_err(|m| failure("not_configured", m, false, None, &secrets))?;
    let query = args.query.trim();
    if query.is_empty() {
        return Err(invalid(
            "query",
            "must not be empty; say what to search for",
        ));
    }
    if query.chars().count() > 2000 {
        return Err(invalid("query", "must be at most 2000 characters"));
    }
    if !(1..=MAX_RESULTS).contains(&args.max_results) {
        return Err(invalid("max_results", "must be between 1 and 20"));
    }
    for (field, list) in [
        ("include_domains", &args.include_domains),
        ("exclude_domains", &args.exclude_domains),
    ] {
        if list.len() > MAX_DOMAINS {
            return Err(invalid(
                field,
                &format!("lists at most {MAX_DOMAINS} domains"),
            ));
        }
        if let Some(bad) = list.iter().find(|d| !is_domain(d)) {
            return Err(invalid(
                field,
                &format!(
                    "has {:?}, which is not a domain; write a bare domain such as `nasa.gov`",
                    clip(bad, 100)
                ),
            ));
        }
    }

    let mut body = json!({
        "query": query,
        "max_results": args.max_results,
        "topic": args.topic,
        "search_depth": "basic",
        "include_answer": false,
        "include_raw_content": false,
        "include_images": false,
    });
    if let Some(t) = args.time_range {
        body["time_range"] = json!(t);
    }
    if !args.include_domains.is_empty() {
        body["include_domains"] = json!(args.include_domains);
    }
    if !args.exclude_domains.is_empty() {
        body["exclude_domains"] = json!(args.exclude_domains);
    }

    let sent = client()
        .map_err(|m| failure("unavailable", m, true, None, &secrets))?
        .post(url.clone())
        .bearer_auth(api_key)
        .json(&body)
        .send()
        .await;
    let mut response = match sent {
        Ok(r) => r,
        Err(e) => {
            let what = if e.is_timeout() {
                "did not answer in time"
            } else {
                "could not be reached"
            };
            return Err(failure(
                "unreachable",
                format!(
                    "the search service at {} {what} ({}); try again later",
                    shown(&url),
                    without_url(&e)
                ),
                true,
                None,
                &secrets,
            ));
        }
    };
    let status = response.status();
    let retry_after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(retry_after_seconds);
    let bytes = read_capped(&mut response).await.map_err(|m| {
        failure(
            "unreachable",
            format!("the search service's answer was cut off: {m}; try again"),
            true,
            None,
            &secrets,
        )
    })?;
    if !status.is_success() {
        return Err(status_failure(
            status.as_u16(),
            &bytes,
            retry_after,
            &secrets,
        ));
    }
    let answer: TavilyAnswer = serde_json::from_slice(&bytes).map_err(|e| {
        failure(
            "invalid_answer",
            format!(
                "the search service answered with something that is not Tavily's result shape: {e}"
            ),
            false,
            None,
            &secrets,
        )
    })?;
    let mut results: Vec<SearchResult> = answer
        .results
        .into_iter()
        .map(|r| SearchResult {
            title: scrub(&r.title.unwrap_or_default(), &secrets),
            url: scrub(&r.url, &secrets),
            content: scrub(&r.content.unwrap_or_default(), &secrets),
            score: r.score.unwrap_or(0.0),
        })
        .collect();
    results.truncate(args.max_results as usize);
    Ok(WebSearchAnswer {
        query: query.to_owned(),
        results,
    })
}

/// Tavily's answer, as far as `web_search` reads it.
#[derive(Deserialize)]
struct TavilyAnswer {
    results: Vec<TavilyResult>,
}

#[derive(Deserialize)]
struct TavilyResult {
    #[serde(default)]
    title: Option<String>,
    url: String,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    score: Option<f64>,
}

fn invalid(field: &str, what: &str) -> ToolError {
    ToolError::new(
        toolshed_core::ErrorCode::InvalidArgs,
        format!("{field} {what}"),
    )
    .with_details(json!({"kind": "invalid_args", "field": field, "retryable": false}))
}

/// The error result for a non-2xx answer: what it means and what to do.
fn status_failure(
    status: u16,
    body: &[u8],
    retry_after: Option<u64>,
    secrets: &[&str],
) -> ToolError {
    let said = service_message(body);
    let said = if said.is_empty() {
        String::new()
    } else {
        format!(": {said}")
    };
    let wait = match retry_after {
        Some(s) => format!("wait {s} s, then try again"),
        None => "wait a little, then try again".into(),
    };
    match status {
        401 | 403 => failure(
            "unauthorized",
            format!(
                "the search service refused the API key ({status}{said}); check {TAVILY_API_KEY_ENV} — trying again will not help"
            ),
            false,
            None,
            secrets,
        ),
        429 => failure(
            "rate_limited",
            format!("the search service is rate-limiting these requests (429{said}); {wait}"),
            true,
            Some(retry_after.unwrap_or(1)),
            secrets,
        ),
        432 | 433 => failure(
            "quota_exceeded",
            format!(
                "the search service's usage limit for this key is spent ({status}{said}); searching again will not help until the plan or limit is raised"
            ),
            false,
            None,
            secrets,
        ),
        400 | 422 => failure(
            "bad_request",
            format!(
                "the search service refused the request ({status}{said}); change the query or the filters"
            ),
            false,
            None,
            secrets,
        ),
        500..=599 => failure(
            "unavailable",
            format!("the search service failed ({status}{said}); {wait}"),
            true,
            retry_after,
            secrets,
        ),
        _ => failure(
            "unexpected_status",
            format!("the search service answered {status}{said}"),
            false,
            None,
            secrets,
        ),
    }
}

/// Tavily's error text (`{"detail": {"error": "…"}}`, or `{"detail": "…"}`), clipped.
fn service_message(body: &[u8]) -> String {
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => return String::new(),
    };
    let text = v["detail"]["error"]
        .as_str()
        .or_else(|| v["detail"].as_str())
        .or_else(|| v["error"].as_str())
        .or_else(|| v["message"].as_str())
        .unwrap_or("");
    clip(text.trim(), 300)
}

/// `Retry-After` as seconds: a number of seconds, or an HTTP date.
fn retry_after_seconds(value: &str) -> Option<u64> {
    let value = value.trim();
    if let Ok(s) = value.parse::<u64>() {
        return Some(s.min(86_400));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let secs = (at.timestamp() - chrono::Utc::now().timestamp()).max(0);
    Some(u64::try_from(secs).unwrap_or(0).min(86_400))
}

/// `{base}/search`, with the base checked: `https://`, or `http://` to loopback.
fn search_url(base: &str) -> Result<reqwest::Url, String> {
    let bad = |why: &str| {
        format!(
            "{TAVILY_BASE_URL_ENV} {why}; set it to an https:// URL such as {DEFAULT_TAVILY_BASE_URL} (http:// only to a loopback address)"
        )
    };
    let url = reqwest::Url::parse(base.trim()).map_err(|_| bad("is not a URL"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("must not carry a user or password"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("must not have a query or fragment"));
    }
    let loopback = match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => return Err(bad("has no host")),
    };
    match url.scheme() {
        "https" => {}
        "http" if loopback => {}
        "http" => return Err(bad("is plain http to a host that is not loopback")),
        _ => return Err(bad("must be https://")),
    }
    let path = url.path().trim_end_matches('/').to_owned();
    let mut url = url;
    url.set_path(&format!("{path}/search"));
    Ok(url)
}

/// The URL as shown in messages: scheme, host and path only.
fn shown(url: &reqwest::Url) -> String {
    format!(
        "{}://{}{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.path()
    )
}

/// A reqwest error's text without the URL it carries.
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(u) = e.url() {
        text = text.replace(u.as_str(), "the URL");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    clip(&text, 300)
}

async fn read_capped(response: &mut reqwest::Response) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| without_url(&e))? {
        if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!("it is larger than {MAX_ANSWER_BYTES} bytes"));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// One client for every call: connections to the API are reused.
fn client() -> Result<reqwest::Client, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(Duration::from_secs(10))
                .timeout(Duration::from_secs(25))
                .build()
                .map_err(|e| format!("cannot build the HTTP client: {e}"))
        })
        .clone()
}

/// A bare domain: labels of letters, digits and `-`, dot-separated (a leading `*.` or
/// `.` is allowed, as Tavily's filters take it).
fn is_domain(d: &str) -> bool {
    let d = d
        .strip_prefix("*.")
        .or_else(|| d.strip_prefix('.'))
        .unwrap_or(d);
    !d.is_empty()
        && d.len() <= 253
        && d.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_checked() {
        assert_eq!(
            search_url("https://api.tavily.com").map(|u| u.to_string()),
            Ok("https://api.tavily.com/search".to_owned())
        );
        assert_eq!(
            search_url("http://127.0.0.1:8080/v1/").map(|u| u.to_string()),
            Ok("http://127.0.0.1:8080/v1/search".to_owned())
        );
        assert!(search_url("http://localhost:1").is_ok());
        assert!(search_url("http://[::1]:1").is_ok());
        for bad in [
            "http://api.tavily.com",
            "http://10.0.0.1",
            "ftp://x",
            "https://u:p@api.tavily.com",
            "https://api.tavily.com/?x=1",
            "not a url",
        ] {
            let e = search_url(bad).expect_err(bad);
            assert!(e.contains(TAVILY_BASE_URL_ENV), "{e}");
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(retry_after_seconds("30"), Some(30));
        assert_eq!(
            retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(0)
        );
        assert_eq!(retry_after_seconds("soon"), None);
    }

    #[test]
    fn domains() {
        for ok in ["nasa.gov", "a-b.example.co.uk", "*.example.com"] {
            assert!(is_domain(ok), "{ok}");
        }
        for bad in ["", "a b", "https://x.com", "x..y", "x/y", "é.com"] {
            assert!(!is_domain(bad), "{bad}");
        }
    }
}
