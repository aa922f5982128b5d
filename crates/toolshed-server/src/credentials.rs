//! The operator's credentials policy: which credential names each tenant's tools may
//! declare, and where each one's value comes from (an environment variable or a Vault
//! entry). A tool never gets a credential because it declares a name: the policy must
//! list it for the tenant of the run, and `TOOLSHED_*` names (the server's own) are never
//! served whatever it says.
//!
//! ```yaml
//! acme:                       # a tenant
//!   STRIPE_KEY: {provider: env, key: ACME_STRIPE_KEY}
//!   ORDERS_DB: {provider: vault, key: acme-orders-db}
//! "*":                        # every tenant
//!   MAPS_KEY: {provider: env} # the key defaults to the name
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use toolshed_api::FieldProblem;
use toolshed_core::credentials::check_segment;
use toolshed_core::{CredentialError, CredentialProvider, ErrorCode, Principal, Secret};
use toolshed_providers::VaultProvider;

use crate::error::ApiError;

/// The tenant entry that applies to every tenant.
pub const ANY_TENANT: &str = "*";

/// Names that are the server's own: never served to a tool.
pub const RESERVED_PREFIX: &str = "TOOLSHED_";

/// Environment variables the server reads for itself, which no policy entry may name
/// as a key: they would hand the server's own secrets to a tool.
pub const SERVER_SECRET_VARS: &[&str] = &[
    "VAULT_TOKEN",
    "VAULT_ADDR",
    "DATABASE_URL",
    "PGPASSWORD",
    "PGPASSFILE",
];

/// Where one credential's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// An environment variable of the server.
    Env,
    /// An entry of the Vault / OpenBao KV v2 mount named by `VAULT_ADDR`, `VAULT_TOKEN`
    /// and `TOOLSHED_VAULT_MOUNT`.
    Vault,
}

/// One allowed credential.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Where the value comes from.
    pub provider: Source,
    /// The variable or Vault entry holding it; the credential's own name when unset.
    #[serde(default)]
    pub key: Option<String>,
}

impl Entry {
    fn key<'a>(&'a self, name: &'a str) -> &'a str {
        self.key.as_deref().unwrap_or(name)
    }
}

/// The policy: tenant (or `*`) → credential name → entry. Empty by default: no tool
/// gets any credential until the operator lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CredentialsPolicy {
    tenants: BTreeMap<String, BTreeMap<String, Entry>>,
}

/// Why a policy was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("credentials policy {origin}: {message}")]
pub struct PolicyError {
    /// The file, or `(inline)`.
    pub origin: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl CredentialsPolicy {
    /// Parse a policy from YAML or JSON text (JSON is YAML), checking every entry.
    pub fn parse(text: &str, origin: &str) -> Result<Self, PolicyError> {
        let err = |message: String| PolicyError {
            origin: origin.to_owned(),
            message,
        };
        let tenants: BTreeMap<String, BTreeMap<String, Entry>> = if text.trim().is_empty() {
            BTreeMap::new()
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| {
                err(format!(
                    "{e}; write `TENANT: {{NAME: {{provider: env|vault, key: VARIABLE_OR_ENTRY}}}}`"
                ))
            })?
        };
        for (tenant, names) in &tenants {
            if tenant.trim().is_empty() {
                return Err(err("a tenant is empty; name one, or `*` for all".into()));
            }
            for (name, entry) in names {
                let at = format!("`{tenant}`.`{name}`");
                check_segment(name).map_err(|why| {
                    err(format!(
                        "{at}: the name {why}; names match ^[A-Za-z][A-Za-z0-9_-]*$"
                    ))
                })?;
                if is_reserved(name) {
                    return Err(err(format!(
                        "{at}: {RESERVED_PREFIX}* names are the server's own and are never served to tools; pick another name"
                    )));
                }
                let key = entry.key(name);
                check_segment(key).map_err(|why| {
                    err(format!(
                        "{at}: the key {why}; keys match ^[A-Za-z][A-Za-z0-9_-]*$"
                    ))
                })?;
                if entry.provider == Source::Env
                    && (is_reserved(key) || SERVER_SECRET_VARS.contains(&key))
                {
                    return Err(err(format!(
                        "{at}: the variable `{key}` holds the server's own settings and is never served to tools; use a variable of its own"
                    )));
                }
            }
        }
        Ok(CredentialsPolicy { tenants })
    }

    /// Read and parse a policy file.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError {
            origin: origin.clone(),
            message: format!("cannot read it: {e}"),
        })?;
        Self::parse(&text, &origin)
    }

    /// Whether any entry reads from Vault.
    pub fn uses_vault(&self) -> bool {
        self.tenants
            .values()
            .flat_map(BTreeMap::values)
            .any(|e| e.provider == Source::Vault)
    }

    /// The entry serving `name` to `tenant`: the tenant's own, else `*`'s.
    pub fn entry(&self, tenant: &str, name: &str) -> Option<&Entry> {
        if is_reserved(name) {
            return None;
        }
        self.tenants
            .get(tenant)
            .and_then(|names| names.get(name))
            .or_else(|| self.tenants.get(ANY_TENANT)?.get(name))
    }

    /// Check the credentials a tool declares at registration, for the registering
    /// tenant: a 422 `CREDENTIAL_NOT_ALLOWED` naming every name outside the policy and
    /// the fix.
    pub fn check_declared(&self, tenant: &str, declared: &[String]) -> Result<(), ApiError> {
        let problems: Vec<FieldProblem> = declared
            .iter()
            .enumerate()
            .filter(|(_, name)| self.entry(tenant, name).is_none())
            .map(|(i, name)| {
                let message = if is_reserved(name) {
                    format!(
                        "`{name}` is one of the server's own names ({RESERVED_PREFIX}*), never served to tools; declare a credential of your own and ask the operator to add it to the credentials policy"
                    )
                } else {
                    format!(
                        "`{name}` is not in the server's credentials policy for tenant `{tenant}`; ask the operator to add it (`toolshed serve --credentials-policy FILE` with `{tenant}: {{{name}: {{provider: env, key: VARIABLE}}}}`), or remove it from `credentials`"
                    )
                };
                FieldProblem::new(format!("credentials[{i}]"), message)
            })
            .collect();
        if problems.is_empty() {
            return Ok(());
        }
        let text: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        Err(ApiError::new(
            toolshed_api::ApiCode::CredentialNotAllowed,
            format!(
                "the tool declares credentials it may not have: {}",
                text.join("; ")
            ),
        )
        .with_fields(problems))
    }
}

fn is_reserved(name: &str) -> bool {
    name.to_ascii_uppercase().starts_with(RESERVED_PREFIX)
}

/// The tenant a principal acts for (`default` when it names none).
fn tenant_of(principal: Option<&Principal>) -> &str {
    principal
        .and_then(|p| p.tenant.as_deref())
        .unwrap_or(crate::DEFAULT_TENANT)
}

/// The credential provider of every registry tool: the policy, asked for the run's
/// tenant. Built once per server (its Vault client is shared).
#[derive(Clone)]
pub struct PolicyProvider {
    policy: Arc<CredentialsPolicy>,
    vault: Option<Arc<VaultProvider>>,
}

impl fmt::Debug for PolicyProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PolicyProvider")
            .field("tenants", &self.policy.tenants.keys().collect::<Vec<_>>())
            .field("vault", &self.vault.is_some())
            .finish()
    }
}

impl PolicyProvider {
    /// The provider of `policy`; Vault is configured from `VAULT_ADDR`, `VAULT_TOKEN` and
    /// `TOOLSHED_VAULT_MOUNT` when an entry uses it (a missing or bad setting refuses
    /// the start).
    pub fn open(policy: &CredentialsPolicy) -> Result<Self, CredentialError> {
        let vault = if policy.uses_vault() {
            Some(Arc::new(VaultProvider::from_env()?))
        } else {
            None
        };
        Ok(PolicyProvider {
            policy: Arc::new(policy.clone()),
            vault,
        })
    }

    /// The provider of `policy` with Vault entries unserved (they answer that Vault is
    /// not configured): for a state built from a policy [`PolicyProvider::open`] refused.
    pub fn without_vault(policy: &CredentialsPolicy) -> Self {
        PolicyProvider {
            policy: Arc::new(policy.clone()),
            vault: None,
        }
    }

    /// The policy it serves.
    pub fn policy(&self) -> &CredentialsPolicy {
        &self.policy
    }
}

impl CredentialProvider for PolicyProvider {
    fn describe(&self) -> String {
        "policy".into()
    }

    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Secret, CredentialError>> {
        self.get_for(None, name)
    }

    fn get_for<'a>(
        &'a self,
        principal: Option<&'a Principal>,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Secret, CredentialError>> {
        Box::pin(async move {
            let tenant = tenant_of(principal);
            let Some(entry) = self.policy.entry(tenant, name) else {
                return Err(CredentialError::new(
                    ErrorCode::CredentialNotAllowed,
                    format!(
                        "credential `{name}` is not in the server's credentials policy for tenant `{tenant}`; the operator adds it with `toolshed serve --credentials-policy FILE`"
                    ),
                ));
            };
            let key = entry.key(name);
            match entry.provider {
                Source::Env => match std::env::var(key) {
                    Ok(v) => Ok(Secret::new(v)),
                    Err(_) => Err(CredentialError::new(
                        ErrorCode::CredentialNotFound,
                        format!(
                            "credential `{name}` comes from the server's environment variable `{key}`, which is not set (or not UTF-8)"
                        ),
                    )),
                },
                Source::Vault => match &self.vault {
                    Some(vault) => vault.get(key).await,
                    None => Err(CredentialError::new(
                        ErrorCode::CredentialProviderError,
                        format!("credential `{name}` comes from Vault, which is not configured"),
                    )),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_names_and_the_servers_variables_are_refused_in_a_policy() {
        for (text, needle) in [
            (
                "acme: {TOOLSHED_JWT_SECRET: {provider: env}}",
                "server's own",
            ),
            ("acme: {toolshed_x: {provider: env}}", "server's own"),
            (
                "acme: {X: {provider: env, key: TOOLSHED_ADMIN_PASSWORD}}",
                "TOOLSHED_ADMIN_PASSWORD",
            ),
            (
                "acme: {X: {provider: env, key: VAULT_TOKEN}}",
                "VAULT_TOKEN",
            ),
            ("acme: {X: {provider: file}}", "provider"),
            ("acme: {X: {provider: env, extra: 1}}", "extra"),
            ("acme: {\"a/b\": {provider: env}}", "the name"),
            ("[1, 2]", "TENANT"),
        ] {
            let e = CredentialsPolicy::parse(text, "p.yaml").expect_err(text);
            assert!(e.to_string().contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn a_tenant_gets_its_own_names_and_the_shared_ones_only() {
        let p = CredentialsPolicy::parse(
            r#"{"acme": {"STRIPE_KEY": {"provider": "env", "key": "ACME_STRIPE"}}, "*": {"MAPS": {"provider": "vault"}}}"#,
            "p.json",
        )
        .expect("valid");
        assert_eq!(
            p.entry("acme", "STRIPE_KEY").and_then(|e| e.key.as_deref()),
            Some("ACME_STRIPE")
        );
        assert!(p.entry("beta", "STRIPE_KEY").is_none());
        assert!(p.entry("beta", "MAPS").is_some());
        assert!(p.uses_vault());
        assert!(
            p.check_declared("acme", &["STRIPE_KEY".into(), "MAPS".into()])
                .is_ok()
        );
        let e = p
            .check_declared("beta", &["MAPS".into(), "STRIPE_KEY".into()])
            .expect_err("not beta's");
        assert_eq!(e.code(), toolshed_api::ApiCode::CredentialNotAllowed);
        assert!(e.message().contains("`STRIPE_KEY`"), "{}", e.message());
    }
}
