//! A credential provider that reads secrets from a HashiCorp Vault or OpenBao KV v2 mount.
//!
//! A credential `NAME` is read from `{address}/v1/{mount}/data/{NAME}`; the value is the
//! entry's `field` (default `value`), or its only field when it has exactly one.
//!
//! ```no_run
//! use toolshed_core::{CredentialProvider, Secret};
//! use toolshed_providers::{VaultConfig, VaultProvider};
//!
//! # async fn demo() -> Result<(), toolshed_core::CredentialError> {
//! let vault = VaultProvider::new(
//!     VaultConfig::new("https://vault.example.com:8200", Secret::new("s.token"))
//!         .mount("kv")
//!         .field("api_key"),
//! )?;
//! let key = vault.get("SEARCH_API_KEY").await?;
//! # let _ = key;
//! # Ok(())
//! # }
//! ```
//!
//! Neither the token nor any secret value ever appears in an error message, a `Debug`
//! or a `Display` of these types. The token is not sent across redirects: a redirect is
//! reported as an error naming where Vault pointed.

use std::fmt;
use std::time::Duration;

use futures_util::future::BoxFuture;
use reqwest::header::{HeaderValue, LOCATION};
use reqwest::{StatusCode, Url};
use serde_json::Value;
use toolshed_core::credentials::{check_credential_name, check_segment};
use toolshed_core::{CredentialError, CredentialProvider, ErrorCode, Secret};

/// The default KV v2 mount (the one a Vault or OpenBao dev server creates).
pub const DEFAULT_MOUNT: &str = "secret";
/// The default field of a KV entry that holds the secret.
pub const DEFAULT_FIELD: &str = "value";
/// The default time allowed for one request to Vault.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The environment variable holding the Vault address, e.g. `https://vault:8200`.
pub const ENV_ADDR: &str = "VAULT_ADDR";
/// The environment variable holding the Vault token.
pub const ENV_TOKEN: &str = "VAULT_TOKEN";
/// The optional environment variable naming the KV v2 mount (default `secret`).
pub const ENV_MOUNT: &str = "TOOLSHED_VAULT_MOUNT";

const NAME_RULE: &str = "^[A-Za-z][A-Za-z0-9_-]*$";

/// How to reach Vault and where the secrets live. `Debug` never shows the token.
#[derive(Debug, Clone)]
pub struct VaultConfig {
    /// The server address, e.g. `https://vault.example.com:8200` (a path prefix is kept).
    pub address: String,
    /// The token sent as `X-Vault-Token`.
    pub token: Secret,
    /// The KV v2 mount, `secret` by default; must match `^[A-Za-z][A-Za-z0-9_-]*$`.
    pub mount: String,
    /// The field of the KV entry holding the secret, `value` by default.
    pub field: String,
    /// The time allowed for one request (connect and answer), 10 s by default.
    pub timeout: Duration,
}

impl VaultConfig {
    /// A config with the default mount (`secret`), field (`value`) and timeout (10 s).
    pub fn new(address: impl Into<String>, token: Secret) -> Self {
        VaultConfig {
            address: address.into(),
            token,
            mount: DEFAULT_MOUNT.into(),
            field: DEFAULT_FIELD.into(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Use another KV v2 mount.
    pub fn mount(mut self, mount: impl Into<String>) -> Self {
        self.mount = mount.into();
        self
    }

    /// Read the secret from another field of the KV entry.
    pub fn field(mut self, field: impl Into<String>) -> Self {
        self.field = field.into();
        self
    }

    /// Allow each request this long.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Read `VAULT_ADDR`, `VAULT_TOKEN` and the optional `TOOLSHED_VAULT_MOUNT` from the
    /// process environment.
    pub fn from_env() -> Result<Self, CredentialError> {
        Self::from_vars(|name| match std::env::var(name) {
            Ok(v) => Ok(Some(v)),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(()),
        })
    }

    /// Like [`VaultConfig::from_env`], reading variables through `lookup`: `Ok(None)` for
    /// an unset variable, `Err(())` for one that is set but not valid UTF-8.
    pub fn from_vars(
        lookup: impl Fn(&str) -> Result<Option<String>, ()>,
    ) -> Result<Self, CredentialError> {
        let read = |name: &str| -> Result<Option<String>, CredentialError> {
            match lookup(name) {
                Ok(Some(v)) if v.trim().is_empty() => Ok(None),
                Ok(v) => Ok(v),
                Err(()) => Err(provider_error(format!(
                    "environment variable {name} is not valid UTF-8"
                ))),
            }
        };
        let require = |name: &str, what: &str| -> Result<String, CredentialError> {
            read(name)?.ok_or_else(|| {
                provider_error(format!(
                    "environment variable {name} is not set (or is empty); set it to {what} \
                     to read credentials from Vault"
                ))
            })
        };
        let address = require(ENV_ADDR, "the Vault address (e.g. https://vault:8200)")?;
        let token = require(ENV_TOKEN, "a Vault token")?;
        let mut config = VaultConfig::new(address.trim(), Secret::new(token.trim()));
        if let Some(mount) = read(ENV_MOUNT)? {
            config.mount = mount.trim().to_string();
        }
        Ok(config)
    }
}

/// Reads credentials from a Vault / OpenBao KV v2 mount. Build it once and share it: it
/// holds one HTTP client (and its connection pool).
///
/// `Debug` and `Display` show the address and the mount only.
#[derive(Clone)]
pub struct VaultProvider {
    /// The address without a trailing `/`.
    address: String,
    mount: String,
    field: String,
    timeout: Duration,
    /// The token, kept to scrub it from any text Vault sends back.
    token: Secret,
    /// The token as a header value marked sensitive.
    token_header: HeaderValue,
    client: reqwest::Client,
}

impl fmt::Debug for VaultProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VaultProvider")
            .field("address", &self.address)
            .field("mount", &self.mount)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for VaultProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vault({}) at {}", self.mount, self.address)
    }
}

impl VaultProvider {
    /// Check the config and build the HTTP client. Fails with `INVALID_VAULT_MOUNT` when
    /// the mount is not `^[A-Za-z][A-Za-z0-9_-]*$` (checked first), and with
    /// `CREDENTIAL_PROVIDER_ERROR` when the address is not an http(s) URL, the token is
    /// empty or unusable in a header, or the client cannot be built.
    pub fn new(config: VaultConfig) -> Result<Self, CredentialError> {
        let VaultConfig {
            address,
            token,
            mount,
            field,
            timeout,
        } = config;
        check_segment(&mount).map_err(|why| {
            CredentialError::new(
                ErrorCode::InvalidVaultMount,
                format!("Vault mount {mount:?} {why}; mounts must match {NAME_RULE}"),
            )
        })?;
        let address = check_address(&address)?;
        if token.expose().is_empty() {
            return Err(provider_error("the Vault token is empty"));
        }
        let mut token_header = HeaderValue::from_str(token.expose()).map_err(|_| {
            provider_error(
                "the Vault token contains characters that cannot be sent in an HTTP header",
            )
        })?;
        token_header.set_sensitive(true);
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            // Never send the token to wherever a redirect points.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| {
                provider_error(format!(
                    "cannot build the HTTP client for Vault: {}",
                    error_chain(&e.without_url())
                ))
            })?;
        Ok(VaultProvider {
            address,
            mount,
            field,
            timeout,
            token,
            token_header,
            client,
        })
    }

    /// Build a provider from `VAULT_ADDR`, `VAULT_TOKEN` and the optional
    /// `TOOLSHED_VAULT_MOUNT` (see [`VaultConfig::from_env`]).
    pub fn from_env() -> Result<Self, CredentialError> {
        Self::new(VaultConfig::from_env()?)
    }

    /// The server address (without a trailing `/`).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The KV v2 mount.
    pub fn mount(&self) -> &str {
        &self.mount
    }

    /// The field read from each entry.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// Read one secret; `name` must already have passed [`check_credential_name`].
    async fn read(&self, name: &str) -> Result<Secret, CredentialError> {
        let url = format!("{}/v1/{}/data/{}", self.address, self.mount, name);
        let response = self
            .client
            .get(&url)
            .header("X-Vault-Token", self.token_header.clone())
            .send()
            .await
            .map_err(|e| self.transport_error(name, &e))?;
        let status = response.status();
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = response
            .bytes()
            .await
            .map_err(|e| self.transport_error(name, &e))?;

        match status {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND => {
                let detail = self.vault_errors(&body);
                return Err(CredentialError::new(
                    ErrorCode::CredentialNotFound,
                    format!(
                        "credential `{name}` not found in Vault mount `{}` at {}{}",
                        self.mount,
                        self.address,
                        detail
                            .map(|d| format!(" (Vault says: {d})"))
                            .unwrap_or_default()
                    ),
                ));
            }
            StatusCode::FORBIDDEN => {
                return Err(provider_error(format!(
                    "reading credential `{name}` from Vault mount `{}` at {}: permission \
                     denied; check the token's policy (it needs `read` on `{}/data/{name}`) \
                     and that the token is valid and not expired",
                    self.mount, self.address, self.mount
                )));
            }
            s if s.is_redirection() => {
                return Err(provider_error(format!(
                    "Vault at {} answered {s} redirecting to {}; the token is never sent \
                     across a redirect: point the address at that server (the active node) \
                     instead",
                    self.address,
                    location
                        .map(|l| self.scrub(&l))
                        .unwrap_or_else(|| "an unnamed location".into())
                )));
            }
            s => {
                let detail = self.vault_errors(&body);
                return Err(provider_error(format!(
                    "Vault at {} answered {s} when reading credential `{name}` from mount `{}`{}",
                    self.address,
                    self.mount,
                    detail.map(|d| format!(": {d}")).unwrap_or_default()
                )));
            }
        }

        self.secret_from_body(name, &body)
    }

    /// Parse a successful KV v2 read answer and take the secret out of it.
    fn secret_from_body(&self, name: &str, body: &[u8]) -> Result<Secret, CredentialError> {
        let json: Value = serde_json::from_slice(body).map_err(|e| {
            // serde_json syntax errors give a position, never a piece of the input.
            provider_error(format!(
                "Vault at {} answered credential `{name}` with malformed JSON ({e})",
                self.address
            ))
        })?;
        self.pick_field(name, &json)
    }

    /// Take the secret out of a KV v2 read answer, without ever quoting a value.
    fn pick_field(&self, name: &str, json: &Value) -> Result<Secret, CredentialError> {
        let shape_error = |what: &str| {
            provider_error(format!(
                "Vault at {} answered credential `{name}` with an unexpected shape: {what}; \
                 is `{}` a KV version 2 mount?",
                self.address, self.mount
            ))
        };
        let outer = json
            .get("data")
            .ok_or_else(|| shape_error("no `data` object"))?;
        let entry = match outer.get("data") {
            Some(Value::Object(map)) => map,
            Some(Value::Null) => {
                return Err(CredentialError::new(
                    ErrorCode::CredentialNotFound,
                    format!(
                        "credential `{name}` in Vault mount `{}` has no data: its latest \
                         version was deleted or destroyed",
                        self.mount
                    ),
                ));
            }
            Some(_) => return Err(shape_error("`data.data` is not an object")),
            None => return Err(shape_error("no `data.data` object")),
        };
        let (key, value) = match entry.get_key_value(self.field.as_str()) {
            Some(kv) => kv,
            None if entry.len() == 1 => match entry.iter().next() {
                Some(kv) => kv,
                None => return Err(shape_error("an entry that lost its only field")),
            },
            None => {
                let mut keys: Vec<&str> = entry.keys().map(String::as_str).collect();
                keys.sort_unstable();
                let available = if keys.is_empty() {
                    "the entry has no fields".to_string()
                } else {
                    format!("available fields: {}", keys.join(", "))
                };
                return Err(provider_error(format!(
                    "credential `{name}` in Vault mount `{}` has no field `{}` and more than \
                     one field, so which one holds the secret is unclear; {available}; set the \
                     provider's `field` to one of them",
                    self.mount, self.field
                )));
            }
        };
        match value {
            Value::String(s) => Ok(Secret::new(s.as_str())),
            other => Err(provider_error(format!(
                "field `{key}` of credential `{name}` in Vault mount `{}` is {}, not a string",
                self.mount,
                json_kind(other)
            ))),
        }
    }

    /// A message for a request that got no (complete) answer.
    fn transport_error(&self, name: &str, e: &reqwest::Error) -> CredentialError {
        if e.is_timeout() {
            return provider_error(format!(
                "Vault at {} did not answer within {:?} when reading credential `{name}`",
                self.address, self.timeout
            ));
        }
        let what = if e.is_connect() {
            "cannot connect to"
        } else {
            "request failed to"
        };
        // reqwest's own top message ("error sending request for url (...)") says less
        // than its causes; start from those when there are any.
        let cause = match std::error::Error::source(e) {
            Some(source) => error_chain(source),
            None => error_chain(e),
        };
        provider_error(format!(
            "{what} Vault at {} when reading credential `{name}`: {}",
            self.address,
            self.scrub(&cause)
        ))
    }

    /// Vault's `errors` list from an error answer, scrubbed of the token, if any.
    fn vault_errors(&self, body: &[u8]) -> Option<String> {
        let json: Value = serde_json::from_slice(body).ok()?;
        let errors: Vec<&str> = json
            .get("errors")?
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .filter(|s| !s.trim().is_empty())
            .collect();
        if errors.is_empty() {
            None
        } else {
            Some(self.scrub(&errors.join("; ")))
        }
    }

    /// Remove the token from text that came from outside, in case it echoes it. Like the
    /// pipeline's scrubbing, values shorter than 4 characters are left alone: they would
    /// shred every message and cannot be told from ordinary text.
    fn scrub(&self, text: &str) -> String {
        let token = self.token.expose();
        if token.len() < 4 {
            return text.to_string();
        }
        text.replace(token, "[REDACTED]")
    }
}

impl CredentialProvider for VaultProvider {
    fn describe(&self) -> String {
        format!("vault({})", self.mount)
    }

    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, CredentialError>> {
        Box::pin(async move {
            // Checked here too, not only by the caller: the name goes into a URL path.
            check_credential_name(name)?;
            self.read(name).await
        })
    }
}

/// Check that `address` is an absolute http(s) URL without credentials, query or
/// fragment, and return it without a trailing `/`.
fn check_address(address: &str) -> Result<String, CredentialError> {
    // An address with `@` may carry a password: never echo it.
    let shown = if address.contains('@') {
        "(not shown: it contains `@`)".to_string()
    } else {
        format!("{address:?}")
    };
    let bad = |why: &str| {
        provider_error(format!(
            "Vault address {shown} {why}; give an http(s) URL such as \
             https://vault.example.com:8200"
        ))
    };
    if !address.contains("://") {
        return Err(bad("has no scheme (http:// or https://)"));
    }
    let url = Url::parse(address).map_err(|e| bad(&format!("is not a URL ({e})")))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad(
            "contains a user name or password; remove them and pass the token as the token",
        ));
    }
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(&format!(
            "has scheme `{}`, not http or https",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("has a query or fragment"));
    }
    Ok(address.trim_end_matches('/').to_string())
}

fn provider_error(message: impl Into<String>) -> CredentialError {
    CredentialError::new(ErrorCode::CredentialProviderError, message)
}

/// An error and its causes, joined with `: ` (reqwest's own message alone is vague).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(address: &str) -> VaultConfig {
        VaultConfig::new(address, Secret::new("tok-abcdef"))
    }

    #[test]
    fn mount_is_checked_before_the_address() {
        let err = VaultProvider::new(config("not a url").mount("a/b")).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidVaultMount);
        assert!(err.message.contains("\"a/b\""), "{}", err.message);
        assert!(err.message.contains(NAME_RULE), "{}", err.message);
    }

    #[test]
    fn addresses_are_checked() {
        for bad in [
            "not a url",
            "ftp://vault:8200",
            "vault:8200",
            "localhost:8200",
            "http://vault:8200/?x=1",
            "http://vault:8200/#frag",
        ] {
            let err = VaultProvider::new(config(bad)).unwrap_err();
            assert_eq!(err.code, ErrorCode::CredentialProviderError, "{bad}");
            assert!(
                err.message.contains("Vault address"),
                "{bad}: {}",
                err.message
            );
        }
        for with_password in [
            "http://user:hunter2pw@vault:8200",
            "ftp://user:hunter2pw@vault:8200",
            "http://user:hunter2pw@vault:badport",
        ] {
            let err = VaultProvider::new(config(with_password)).unwrap_err();
            assert_eq!(err.code, ErrorCode::CredentialProviderError);
            assert!(!err.message.contains("hunter2pw"), "{}", err.message);
        }
        let ok = VaultProvider::new(config("https://vault.example.com:8200/prefix/")).unwrap();
        assert_eq!(ok.address(), "https://vault.example.com:8200/prefix");
    }

    #[test]
    fn token_is_checked_without_printing_it() {
        let err = VaultProvider::new(VaultConfig::new("http://v:1", Secret::new(""))).unwrap_err();
        assert_eq!(err.code, ErrorCode::CredentialProviderError);
        let err = VaultProvider::new(VaultConfig::new("http://v:1", Secret::new("ab\ncdsecret")))
            .unwrap_err();
        assert!(!err.message.contains("cdsecret"), "{}", err.message);
    }

    #[test]
    fn from_vars_names_the_missing_variable() {
        let none = |_: &str| Ok(None);
        let err = VaultConfig::from_vars(none).unwrap_err();
        assert!(err.message.contains("VAULT_ADDR"), "{}", err.message);

        let addr_only = |n: &str| Ok((n == "VAULT_ADDR").then(|| "http://v:8200".to_string()));
        let err = VaultConfig::from_vars(addr_only).unwrap_err();
        assert!(err.message.contains("VAULT_TOKEN"), "{}", err.message);

        let not_utf8 = |n: &str| if n == "VAULT_ADDR" { Err(()) } else { Ok(None) };
        let err = VaultConfig::from_vars(not_utf8).unwrap_err();
        assert!(err.message.contains("VAULT_ADDR"), "{}", err.message);
        assert!(err.message.contains("UTF-8"), "{}", err.message);

        let all = |n: &str| {
            Ok(match n {
                "VAULT_ADDR" => Some("http://v:8200".to_string()),
                "VAULT_TOKEN" => Some("tok-xyz".to_string()),
                "TOOLSHED_VAULT_MOUNT" => Some("kv".to_string()),
                _ => None,
            })
        };
        let config = VaultConfig::from_vars(all).unwrap();
        assert_eq!(config.mount, "kv");
        assert_eq!(config.token.expose(), "tok-xyz");
        assert_eq!(config.field, DEFAULT_FIELD);

        let defaults = |n: &str| {
            Ok(match n {
                "VAULT_ADDR" => Some("http://v:8200".to_string()),
                "VAULT_TOKEN" => Some("tok-xyz".to_string()),
                _ => None,
            })
        };
        assert_eq!(
            VaultConfig::from_vars(defaults).unwrap().mount,
            DEFAULT_MOUNT
        );

        let bad_mount = |n: &str| {
            Ok(match n {
                "VAULT_ADDR" => Some("http://v:8200".to_string()),
                "VAULT_TOKEN" => Some("tok-xyz".to_string()),
                "TOOLSHED_VAULT_MOUNT" => Some("kv/v2".to_string()),
                _ => None,
            })
        };
        let err = VaultProvider::new(VaultConfig::from_vars(bad_mount).unwrap()).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidVaultMount);
    }

    #[test]
    fn picking_the_field_never_quotes_values() {
        let p = VaultProvider::new(config("http://v:8200")).unwrap();
        let pick = |body: Value| p.pick_field("K", &body);

        let s = pick(serde_json::json!({"data": {"data": {"value": "v1", "other": "o"}}}));
        assert_eq!(s.unwrap().expose(), "v1");
        let s = pick(serde_json::json!({"data": {"data": {"only": "v2"}}}));
        assert_eq!(s.unwrap().expose(), "v2");

        let err = pick(serde_json::json!({"data": {"data": {"a": "sec-a1", "b": "sec-b1"}}}))
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::CredentialProviderError);
        assert!(err.message.contains("a, b"), "{}", err.message);
        assert!(!err.message.contains("sec-"), "{}", err.message);

        let err = pick(serde_json::json!({"data": {"data": {"value": 123456}}})).unwrap_err();
        assert!(err.message.contains("a number"), "{}", err.message);
        assert!(!err.message.contains("123456"), "{}", err.message);

        let err = pick(serde_json::json!({"data": {"data": "sec-string"}})).unwrap_err();
        assert!(!err.message.contains("sec-string"), "{}", err.message);

        let err = pick(serde_json::json!({"data": {"data": null}})).unwrap_err();
        assert_eq!(err.code, ErrorCode::CredentialNotFound);

        let err = pick(serde_json::json!({"oops": true})).unwrap_err();
        assert_eq!(err.code, ErrorCode::CredentialProviderError);
    }

    #[test]
    fn malformed_json_is_a_provider_error_without_the_body() {
        let p = VaultProvider::new(config("http://v:8200")).unwrap();
        for body in [
            &b"not json sec-abc123"[..],
            b"{\"data\": {\"data\": {\"value\": \"sec-abc123\"",
            b"",
            b"<html>sec-abc123</html>",
        ] {
            let err = p.secret_from_body("K", body).unwrap_err();
            assert_eq!(err.code, ErrorCode::CredentialProviderError);
            assert!(err.message.contains("malformed JSON"), "{}", err.message);
            assert!(!err.message.contains("sec-abc123"), "{}", err.message);
        }
    }
}
