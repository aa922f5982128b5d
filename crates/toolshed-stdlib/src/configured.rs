//! A built-in run outside an agent project: handed exactly the env it declares
//! ([`required_env`](crate::required_env) and [`optional_env`](crate::optional_env)),
//! read for each call from a [`CredentialProvider`] on behalf of the run's principal,
//! and nothing else. In an agent project the agent's declared env is the source (it
//! folds in each listed built-in's names at start-up); without one, the CLI reads its
//! own environment and the registry server its credentials policy, per tenant, so one
//! tenant's key never reaches another tenant's run.
//!
//! Which parts of those values are secret is [`secret_parts`]: they are scrubbed from
//! whatever the built-in answers, as a credential a tool read is.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::StreamExt;
use toolshed_core::credentials::{scrub_error, scrub_value};
use toolshed_core::{
    Chunk, CredentialError, CredentialProvider, ErrorCode, Handler, HandlerFuture, Reply, Secret,
    Tool, ToolContext, ToolError, ToolOutput,
};

use crate::common::failure;

/// `tool` (a built-in) reading the env it declares from `source`, for each call, on
/// behalf of the run's principal: its handler sees exactly those names in `ctx.env`
/// (the run's own env is not passed on). A required name the source lacks (not set,
/// or not allowed for the run's tenant) answers `not_configured` with the source's
/// reason; a source that fails (a secret store that does not answer) answers
/// `unavailable`, retryable. A built-in that declares no env sees an empty `ctx.env`.
pub fn with_env_from(tool: Tool, source: Arc<dyn CredentialProvider>) -> Tool {
    let name = crate::canonical_name(tool.name()).to_owned();
    let handler = EnvFrom {
        required: crate::required_env(&name),
        optional: crate::optional_env(&name),
        tool: name.into(),
        inner: tool.handler().clone(),
        source,
    };
    tool.with_handler(Arc::new(handler))
}

/// The parts of a built-in's env value that must never be shown: an API key whole,
/// the password of a database URL (as written and percent-decoded). Empty for a value
/// that holds no secret (`TAVILY_BASE_URL`, a SQLite path, a URL without a password)
/// and for names that are not a built-in's.
pub fn secret_parts(name: &str, value: &str) -> Vec<Secret> {
    match name {
        crate::web_search::TAVILY_API_KEY_ENV if !value.trim().is_empty() => {
            vec![Secret::new(value)]
        }
        crate::sql_query::SQL_DATABASE_URL_ENV => crate::sql_query::url_secrets(value)
            .into_iter()
            .map(Secret::new)
            .collect(),
        // Any other declared env value (Toren's `env`): whole when its name says it is
        // a secret (`TICKETS_API_KEY`), and a URL's password wherever it is written.
        _ if names_a_secret(name) && value.trim().len() >= MIN_SECRET_CHARS => {
            vec![Secret::new(value)]
        }
        _ => crate::sql_query::url_secrets(value)
            .into_iter()
            .map(Secret::new)
            .collect(),
    }
}

/// Shorter values are not scrubbed: replacing every `1` or `on` in an answer would
/// mangle it and hide nothing.
const MIN_SECRET_CHARS: usize = 4;

/// Words that mark an env name as a secret's, as `API_KEY`, `GITHUB_TOKEN` or
/// `DB_PASSWORD` write them.
const SECRET_WORDS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "PRIVATE",
    "SIGNATURE",
    "COOKIE",
    "SESSION",
];

/// Whether one of the `_`-separated words of `name` (any case) marks a secret.
fn names_a_secret(name: &str) -> bool {
    name.split(['_', '-', '.'])
        .any(|word| SECRET_WORDS.iter().any(|w| word.eq_ignore_ascii_case(w)))
}

/// The secret parts ([`secret_parts`]) of every value of `env`: what a runtime whose
/// env holds built-ins' values scrubs from every call's answer.
pub fn secrets_of_env(env: &BTreeMap<String, String>) -> Vec<Secret> {
    env.iter()
        .flat_map(|(name, value)| secret_parts(name, value))
        .collect()
}

#[derive(Clone)]
struct EnvFrom {
    tool: Arc<str>,
    required: &'static [&'static str],
    optional: &'static [&'static str],
    inner: Arc<dyn Handler>,
    source: Arc<dyn CredentialProvider>,
}

impl EnvFrom {
    /// The declared env for this call, or the error result that stops it.
    async fn resolve(&self, ctx: &ToolContext) -> Result<BTreeMap<String, String>, ToolError> {
        let mut env = BTreeMap::new();
        let names = self
            .required
            .iter()
            .map(|n| (*n, true))
            .chain(self.optional.iter().map(|n| (*n, false)));
        for (name, required) in names {
            match self.source.get_for(ctx.principal(), name).await {
                Ok(value) => {
                    env.insert(name.to_owned(), value.expose().to_owned());
                }
                Err(e) if is_absent(&e) && !required => {}
                Err(e) if is_absent(&e) => {
                    return Err(failure(
                        "not_configured",
                        format!(
                            "{} needs {name}, which is not configured here: {}",
                            self.tool, e.message
                        ),
                        false,
                        None,
                        &[],
                    ));
                }
                Err(e) => {
                    return Err(failure(
                        "unavailable",
                        format!(
                            "{} cannot read {name} now: {} [{}]",
                            self.tool, e.message, e.code
                        ),
                        true,
                        None,
                        &[],
                    ));
                }
            }
        }
        Ok(env)
    }
}

/// Whether a source's error says the value is simply not there for this run (as
/// opposed to the source failing).
fn is_absent(e: &CredentialError) -> bool {
    matches!(
        e.code,
        ErrorCode::CredentialNotFound
            | ErrorCode::CredentialNotAllowed
            | ErrorCode::CredentialNotDeclared
    )
}

impl Handler for EnvFrom {
    fn call(&self, args: serde_json::Value, ctx: ToolContext) -> HandlerFuture {
        let this = self.clone();
        Box::pin(async move {
            let env = match this.resolve(&ctx).await {
                Ok(env) => env,
                Err(e) => return Reply::new(Err(e)),
            };
            let secrets = secrets_of_env(&env);
            let mut reply = this.inner.call(args, ctx.with_env(env)).await;
            if !secrets.is_empty() {
                scrub_reply(&mut reply, secrets);
            }
            reply
        })
    }
}

/// Scrub `secrets` from everything a reply carries: its value or error, each streamed
/// chunk, its diagnostics.
fn scrub_reply(reply: &mut Reply, secrets: Vec<Secret>) {
    reply.diagnostics.scrub(&secrets);
    let output = std::mem::replace(&mut reply.output, Ok(ToolOutput::Value(Default::default())));
    reply.output = match output {
        Ok(ToolOutput::Value(mut v)) => {
            scrub_value(&mut v, &secrets);
            Ok(ToolOutput::Value(v))
        }
        Ok(ToolOutput::Stream(stream)) => {
            let secrets: Arc<[Secret]> = secrets.into();
            Ok(ToolOutput::Stream(
                stream
                    .map(move |item| match item {
                        Ok(Chunk::Value(mut v)) => {
                            scrub_value(&mut v, &secrets);
                            Ok(Chunk::Value(v))
                        }
                        Ok(Chunk::Diagnostics(mut d)) => {
                            d.scrub(&secrets);
                            Ok(Chunk::Diagnostics(d))
                        }
                        Err(mut e) => {
                            scrub_error(&mut e, &secrets);
                            Err(e)
                        }
                    })
                    .boxed(),
            ))
        }
        Err(mut e) => {
            scrub_error(&mut e, &secrets);
            Err(e)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrubbed(name: &str, value: &str) -> Vec<String> {
        secret_parts(name, value)
            .iter()
            .map(|s| s.expose().to_owned())
            .collect()
    }

    #[test]
    fn a_declared_env_value_named_like_a_secret_is_scrubbed_whole() {
        for name in [
            "TICKETS_API_KEY",
            "github_token",
            "DB_PASSWORD",
            "client-secret",
        ] {
            assert_eq!(scrubbed(name, "tk-live-123"), vec!["tk-live-123"], "{name}");
        }
        // Not a secret's name, too short to hide anything, or empty.
        assert!(scrubbed("KEYBOARD_LAYOUT", "dvorak").is_empty());
        assert!(scrubbed("TICKETS_BASE_URL", "https://tickets.example").is_empty());
        assert!(scrubbed("FEATURE_KEY", "on").is_empty());
        assert!(scrubbed("API_KEY", "  ").is_empty());
    }

    #[test]
    fn a_urls_password_is_scrubbed_in_any_declared_value() {
        let parts = scrubbed("UPSTREAM", "https://bot:hunter22@api.example/v1");
        assert!(parts.iter().any(|p| p == "hunter22"), "{parts:?}");
    }
}
