//! Who owns what: the tenant a caller acts for, and the scope its changes may touch.
//! Reads are organisation-wide (one catalogue); a change to a tool, an agent or a user is
//! checked against the scope by the registry store, in the transaction that writes.

use toolshed_auth::{Claims, Role};
use toolshed_registry::TenantScope;

use crate::DEFAULT_TENANT;

/// The tenant a caller acts for: its token's, or the default tenant for a token that
/// names none (tokens issued by this server always name one).
pub fn tenant_of(claims: &Claims) -> &str {
    claims.tenant.as_deref().unwrap_or(DEFAULT_TENANT)
}

/// What a caller's changes may touch: every tenant for the organisation's owner, its
/// own tenant for everyone else.
pub fn scope_of(claims: &Claims) -> TenantScope {
    if claims.role >= Role::Owner {
        TenantScope::All
    } else {
        TenantScope::Tenant(tenant_of(claims).to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Claims as the server's tokens carry them (made by signing and verifying one, so
    /// they have every field a real token has).
    fn claims(role: Role, tenant: Option<&str>) -> Claims {
        let tokens =
            toolshed_auth::Tokens::new(&[7u8; 32], "toolshed", std::time::Duration::from_secs(60))
                .expect("a valid secret");
        let token = tokens.issue("u", role, tenant).expect("signed");
        tokens.verify(&token).expect("verified")
    }

    #[test]
    fn owners_reach_every_tenant_and_everyone_else_their_own() {
        assert_eq!(
            scope_of(&claims(Role::Owner, Some("acme"))),
            TenantScope::All
        );
        for role in [Role::Viewer, Role::Deployer, Role::Admin] {
            assert_eq!(
                scope_of(&claims(role, Some("acme"))),
                TenantScope::Tenant("acme".into())
            );
        }
        assert_eq!(
            scope_of(&claims(Role::Admin, None)),
            TenantScope::Tenant(DEFAULT_TENANT.into())
        );
    }
}
