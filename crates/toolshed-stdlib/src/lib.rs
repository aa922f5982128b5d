//! toolshed's built-in tools, written as ordinary `#[tool]` functions so they go
//! through exactly the pipeline every other tool does.
//!
//! | tool | what it does |
//! | --- | --- |
//! | `get_current_time` | the current time as ISO 8601 (UTC or a fixed offset) and Unix seconds |
//! | `read_attachment` | one page (or a range) of a file attached to the run or its session, parsed once at upload |
//! | `markdown_writer` | writes a Markdown file in the run's tenant's folder under the output folder, never outside it, never through a symlink, size-capped |
//! | `web_search` (alias `web-search`) | live web search through Tavily's API (`TAVILY_API_KEY`) |
//! | `sql_query` | read-only SQL against `SQL_DATABASE_URL` (SQLite, PostgreSQL, MySQL/MariaDB) |
//!
//! A built-in that needs configuration names it: [`required_env`] (checked at an
//! agent's start-up with its declared env) and [`optional_env`] (passed on when set).
//! Handlers read those values from `ctx.env`, never from the process environment: in an
//! agent project the agent's declared env, elsewhere what [`with_env_from`] reads for
//! each call (the CLI's environment, the server's credentials policy for the run's
//! tenant). [`secret_parts`] says which parts of those values are secrets, scrubbed from
//! every answer.

use toolshed_core::Tool;

mod common;
mod configured;
mod markdown;
mod read_attachment;
pub mod sql_query;
mod time;
pub mod web_search;

pub use configured::{secret_parts, secrets_of_env, with_env_from};
pub use markdown::{
    DEFAULT_TENANT, MAX_FILE_BYTES, MAX_TENANT_BYTES, MAX_TENANT_ENTRIES, OUTPUT_DIR_ENV,
    WrittenFile, markdown_writer, markdown_writer_tool,
};
pub use read_attachment::{DEFAULT_READ_LENGTH, MAX_READ_LENGTH, read_attachment_tool};
pub use time::{CurrentTime, get_current_time, get_current_time_tool};

pub use sql_query::sql_query_tool;
pub use web_search::web_search_tool;

/// Every built-in tool.
pub fn tools() -> Vec<Tool> {
    vec![
        get_current_time_tool(),
        markdown_writer_tool(),
        sql_query_tool(),
        web_search_tool(),
        read_attachment_tool(),
    ]
}

/// A built-in tool by name; `web-search` (AgentBreeder's name) is `web_search`.
pub fn get(name: &str) -> Option<Tool> {
    let name = canonical_name(name);
    tools().into_iter().find(|t| t.name() == name)
}

/// The built-in's own name for `name`: aliases resolve (`web-search` → `web_search`),
/// any other name is returned as it is.
pub fn canonical_name(name: &str) -> &str {
    match name {
        web_search::WEB_SEARCH_ALIAS => web_search::WEB_SEARCH,
        other => other,
    }
}

/// The env vars a built-in cannot run without, by the built-in's name (or alias):
/// folded into an agent's declared env when it lists the built-in, so a missing one is
/// in the start-up error with the agent's own. Empty for a built-in that needs none or
/// a name that is not a built-in.
pub fn required_env(name: &str) -> &'static [&'static str] {
    match canonical_name(name) {
        web_search::WEB_SEARCH => &[web_search::TAVILY_API_KEY_ENV],
        sql_query::SQL_QUERY => &[sql_query::SQL_DATABASE_URL_ENV],
        _ => &[],
    }
}

/// The env vars a built-in reads when they are set (never reported missing), e.g.
/// `TAVILY_BASE_URL`.
pub fn optional_env(name: &str) -> &'static [&'static str] {
    match canonical_name(name) {
        web_search::WEB_SEARCH => &[web_search::TAVILY_BASE_URL_ENV],
        _ => &[],
    }
}
