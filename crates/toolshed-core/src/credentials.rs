//! Credentials: the provider trait, the environment provider, the enforced allowlist
//! and the [`Secret`] type that never prints its value.

use std::fmt;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::context::{Principal, RunContext};
use crate::error::{ErrorCode, ToolError};

/// A secret value. `Debug` and `Display` print `Secret(***)`, so a secret that ends up in
/// a log line or an error by accident does not leak; call [`Secret::expose`] to use it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    /// Wrap a value.
    pub fn new(value: impl Into<Arc<str>>) -> Self {
        Secret(value.into())
    }

    /// The secret value. Keep what you do with it out of results, errors and logs.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Why a credential could not be had. Messages name the credential, never its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct CredentialError {
    /// One of the `CREDENTIAL_*` / `INVALID_*` codes.
    pub code: ErrorCode,
    /// What went wrong, without any secret.
    pub message: String,
}

impl CredentialError {
    /// A new error.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        CredentialError {
            code,
            message: message.into(),
        }
    }
}

impl From<CredentialError> for ToolError {
    fn from(e: CredentialError) -> Self {
        ToolError::new(e.code, e.message)
    }
}

/// Where credential values come from.
pub trait CredentialProvider: Send + Sync + fmt::Debug {
    /// A short name for messages, e.g. `env` or `vault(secret)`.
    fn describe(&self) -> String;

    /// Read the credential `name`. The name has been checked by
    /// [`check_credential_name`] and against the tool's allowlist before this is called.
    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, CredentialError>>;

    /// Read the credential `name` for the run's `principal` (its tenant): a provider
    /// whose answer depends on who asks (a server's per-tenant policy) overrides this;
    /// the default ignores the principal and calls [`CredentialProvider::get`].
    fn get_for<'a>(
        &'a self,
        principal: Option<&'a Principal>,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Secret, CredentialError>> {
        let _ = principal;
        self.get(name)
    }
}

/// Reads credentials from the process environment.
#[derive(Debug, Clone, Copy, Default)]
pub struct EnvProvider;

impl CredentialProvider for EnvProvider {
    fn describe(&self) -> String {
        "env".into()
    }

    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, CredentialError>> {
        let result = match std::env::var(name) {
            Ok(v) => Ok(Secret::new(v)),
            Err(std::env::VarError::NotPresent) => Err(CredentialError::new(
                ErrorCode::CredentialNotFound,
                format!("credential `{name}` is not set in the environment"),
            )),
            Err(std::env::VarError::NotUnicode(_)) => Err(CredentialError::new(
                ErrorCode::CredentialProviderError,
                format!("credential `{name}` in the environment is not valid UTF-8"),
            )),
        };
        Box::pin(std::future::ready(result))
    }
}

/// Check a credential name (or any path segment sent to a secret store) against
/// `^[A-Za-z][A-Za-z0-9_-]*$`. Why: providers such as Vault put the name into a URL
/// path, and `/`, `.`, `?`, `#` or spaces would address something else.
pub fn check_credential_name(name: &str) -> Result<(), CredentialError> {
    check_segment(name).map_err(|why| {
        CredentialError::new(
            ErrorCode::InvalidCredentialName,
            format!("credential name {name:?} {why}; names must match ^[A-Za-z][A-Za-z0-9_-]*$"),
        )
    })
}

/// Check one path segment against `^[A-Za-z][A-Za-z0-9_-]*$`; on failure, say why.
pub fn check_segment(segment: &str) -> Result<(), String> {
    let mut chars = segment.chars();
    match chars.next() {
        None => return Err("is empty".into()),
        Some(c) if !c.is_ascii_alphabetic() => {
            return Err(format!("starts with {c:?}, not a letter"));
        }
        Some(_) => {}
    }
    if let Some(bad) = chars.find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Err(format!("contains {bad:?}"));
    }
    Ok(())
}

/// The credentials a handler may read: the tool's declared names, served by the chosen
/// provider. Every value handed out is remembered so the pipeline can scrub it from
/// errors and crumbs.
#[derive(Clone)]
pub struct Credentials {
    allowed: Arc<[String]>,
    provider: Arc<dyn CredentialProvider>,
    handed_out: Arc<Mutex<Vec<Secret>>>,
    /// The run asking, whose principal the provider is told
    /// ([`CredentialProvider::get_for`]).
    run: Option<RunContext>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("allowed", &self.allowed)
            .field("provider", &self.provider.describe())
            .finish()
    }
}

impl Credentials {
    /// Credentials limited to `allowed`, read from `provider`.
    pub fn new(allowed: Arc<[String]>, provider: Arc<dyn CredentialProvider>) -> Self {
        Credentials {
            allowed,
            provider,
            handed_out: Arc::new(Mutex::new(Vec::new())),
            run: None,
        }
    }

    /// The same credentials read on behalf of `run`'s principal.
    pub fn for_run(mut self, run: &RunContext) -> Self {
        self.run = Some(run.clone());
        self
    }

    /// Read a declared credential. Undeclared names fail with `CREDENTIAL_NOT_DECLARED`,
    /// even when the provider knows them.
    pub async fn get(&self, name: &str) -> Result<Secret, CredentialError> {
        check_credential_name(name)?;
        if !self.allowed.iter().any(|a| a == name) {
            return Err(CredentialError::new(
                ErrorCode::CredentialNotDeclared,
                if self.allowed.is_empty() {
                    format!(
                        "credential `{name}` is not declared: this tool declares no \
                         credentials; add `{name}` to its `credentials` list"
                    )
                } else {
                    format!(
                        "credential `{name}` is not declared; this tool may read only {}; add \
                         `{name}` to its `credentials` list",
                        self.allowed.join(", ")
                    )
                },
            ));
        }
        let principal = self.run.as_ref().and_then(RunContext::principal);
        let secret = self.provider.get_for(principal, name).await?;
        if let Ok(mut seen) = self.handed_out.lock() {
            seen.push(secret.clone());
        }
        Ok(secret)
    }

    /// The declared names.
    pub fn declared(&self) -> &[String] {
        &self.allowed
    }

    /// The values handed out so far in this call (for scrubbing).
    pub(crate) fn handed_out(&self) -> Vec<Secret> {
        self.handed_out
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }
}

/// Replace every occurrence of each secret in `text` with `[REDACTED]`; `None` when
/// there was nothing to replace. The one scrubbing rule: the pipeline, the dispatcher
/// and the diagnostics all use it (with [`scrub_value`] and [`scrub_error`]).
pub fn scrub(text: &str, secrets: &[Secret]) -> Option<String> {
    let mut out: Option<String> = None;
    for s in secrets {
        let value = s.expose();
        // Very short values would redact half of every message; they are not secrets
        // worth the name, and we cannot tell them from ordinary words.
        if value.len() < 4 {
            continue;
        }
        let current = out.as_deref().unwrap_or(text);
        if current.contains(value) {
            out = Some(current.replace(value, "[REDACTED]"));
        }
    }
    out
}

/// Replace each `(path, alias)` of `aliases` (longest first) in `text`.
pub fn alias_paths(text: &mut String, aliases: &[(String, String)]) {
    for (path, alias) in aliases {
        if !path.is_empty() && text.contains(path.as_str()) {
            *text = text.replace(path.as_str(), alias);
        }
    }
}

/// [`alias_paths`] in every string of a JSON value.
pub fn alias_paths_in(value: &mut Value, aliases: &[(String, String)]) {
    match value {
        Value::String(s) => alias_paths(s, aliases),
        Value::Array(items) => items.iter_mut().for_each(|v| alias_paths_in(v, aliases)),
        Value::Object(map) => map.values_mut().for_each(|v| alias_paths_in(v, aliases)),
        _ => {}
    }
}

/// [`scrub`] every string inside a JSON value, keys included.
pub fn scrub_value(value: &mut Value, secrets: &[Secret]) {
    if secrets.is_empty() {
        return;
    }
    match value {
        Value::String(s) => {
            if let Some(clean) = scrub(s, secrets) {
                *s = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| scrub_value(v, secrets)),
        Value::Object(map) => {
            let leaky: Vec<String> = map
                .keys()
                .filter(|k| scrub(k, secrets).is_some())
                .cloned()
                .collect();
            for key in leaky {
                if let (Some(v), Some(clean)) = (map.remove(&key), scrub(&key, secrets)) {
                    map.insert(clean, v);
                }
            }
            map.values_mut().for_each(|v| scrub_value(v, secrets));
        }
        _ => {}
    }
}

/// [`scrub`] an error result's message and details.
pub fn scrub_error(error: &mut ToolError, secrets: &[Secret]) {
    if let Some(clean) = scrub(&error.message, secrets) {
        error.message = clean;
    }
    if let Some(details) = &mut error.details {
        scrub_value(details, secrets);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for ok in ["A", "SEARCH_API_KEY", "db-password", "x1"] {
            assert!(check_credential_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "1abc", "_x", "a/b", "a.b", "a?b", "a#b", "a b", "../etc", "a\n",
        ] {
            let err = check_credential_name(bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidCredentialName, "{bad}");
        }
    }

    #[test]
    fn secret_never_prints() {
        let s = Secret::new("hunter2-very-secret");
        assert_eq!(format!("{s:?} {s}"), "Secret(***) ***");
    }

    #[tokio::test]
    async fn allowlist_is_enforced() {
        // SAFETY-free: test-only env var with a unique name.
        let creds = Credentials::new(
            Arc::from(vec!["DECLARED".to_string()]),
            Arc::new(EnvProvider),
        );
        let err = creds.get("PATH").await.unwrap_err();
        assert_eq!(err.code, ErrorCode::CredentialNotDeclared);
        assert!(err.message.contains("DECLARED"));
        let err = creds.get("DECLARED").await.unwrap_err();
        assert_eq!(err.code, ErrorCode::CredentialNotFound);
        let none = Credentials::new(Arc::from(Vec::<String>::new()), Arc::new(EnvProvider));
        assert_eq!(
            none.get("HOME").await.unwrap_err().code,
            ErrorCode::CredentialNotDeclared
        );
    }

    /// A provider answering with the tenant it was asked for.
    #[derive(Debug)]
    struct PerTenant;

    impl CredentialProvider for PerTenant {
        fn describe(&self) -> String {
            "per-tenant".into()
        }
        fn get<'a>(&'a self, _name: &'a str) -> BoxFuture<'a, Result<Secret, CredentialError>> {
            Box::pin(std::future::ready(Err(CredentialError::new(
                ErrorCode::CredentialNotFound,
                "asked without a principal",
            ))))
        }
        fn get_for<'a>(
            &'a self,
            principal: Option<&'a Principal>,
            _name: &'a str,
        ) -> BoxFuture<'a, Result<Secret, CredentialError>> {
            let tenant = principal.and_then(|p| p.tenant.clone()).unwrap_or_default();
            Box::pin(std::future::ready(Ok(Secret::new(format!("for-{tenant}")))))
        }
    }

    #[tokio::test]
    async fn a_provider_is_told_the_runs_principal() {
        let run = RunContext::builder()
            .principal(Principal {
                iss: "t".into(),
                sub: "ann".into(),
                tenant: Some("acme".into()),
            })
            .build();
        let creds = Credentials::new(Arc::from(vec!["K".to_string()]), Arc::new(PerTenant));
        let unknown = creds.clone().get("K").await.unwrap();
        assert_eq!(unknown.expose(), "for-", "no run, no principal");
        let secret = creds.for_run(&run).get("K").await.unwrap();
        assert_eq!(secret.expose(), "for-acme");
    }

    #[test]
    fn scrubbing() {
        let secrets = vec![Secret::new("s3cr3t-value")];
        assert_eq!(
            scrub("auth failed for s3cr3t-value!", &secrets).as_deref(),
            Some("auth failed for [REDACTED]!")
        );
        assert_eq!(scrub("nothing here", &secrets), None);
        let mut v =
            serde_json::json!({"s3cr3t-value": ["a s3cr3t-value", 1], "k": {"x": "s3cr3t-value"}});
        scrub_value(&mut v, &secrets);
        assert_eq!(
            v,
            serde_json::json!({"[REDACTED]": ["a [REDACTED]", 1], "k": {"x": "[REDACTED]"}})
        );
        let mut e = ToolError::handler("bad s3cr3t-value")
            .with_details(serde_json::json!({"code": "s3cr3t-value"}));
        scrub_error(&mut e, &secrets);
        assert_eq!(e.message, "bad [REDACTED]");
        assert_eq!(e.details.unwrap()["code"], "[REDACTED]");
    }
}
