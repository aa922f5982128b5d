//! `toolshed user …`: the operator's bootstrap commands, written straight into the
//! database named by `--database-url` (no server needed): add a user, list users.

use std::sync::Arc;

use anyhow::anyhow;
use clap::Subcommand;
use serde_json::{Value, json};
use toolshed_auth::{AuthError, Role};
use toolshed_registry::{NewUser, RegistryError, RegistryStore, UserRecord};

use crate::output::{EXIT_BAD_INPUT, EXIT_INTERNAL, Failure, print, print_json, table};
use crate::prompt;

/// `toolshed user` subcommands.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Add a user to the registry database (works without a running server).
    Add {
        /// The user name: 1-64 letters, digits, `.`, `_`, `-` or `@`.
        name: String,
        /// viewer (reads the registry), deployer (also runs tools and decides
        /// approvals), admin (also manages its tenant's users) or owner (manages every
        /// tenant: its users, tools and agents).
        #[arg(long)]
        role: String,
        /// The password, at least 8 characters (asked for twice without echo when left
        /// out; read as one line when stdin is not a terminal).
        #[arg(long)]
        password: Option<String>,
        /// The tenant whose runs the user sees.
        #[arg(long, default_value = toolshed_server::DEFAULT_TENANT)]
        tenant: String,
    },
    /// List the users.
    List,
}

/// Run a `user` subcommand.
pub async fn run(cmd: UserCommand, database_url: &str, json_out: bool) -> Result<(), Failure> {
    match cmd {
        UserCommand::Add {
            name,
            role,
            password,
            tenant,
        } => add(name, &role, password, tenant, database_url, json_out).await,
        UserCommand::List => list(database_url, json_out).await,
    }
}

async fn add(
    name: String,
    role: &str,
    password: Option<String>,
    tenant: String,
    database_url: &str,
    json_out: bool,
) -> Result<(), Failure> {
    // Check everything cheap before asking for a password or opening the database.
    toolshed_server::routes::auth::check_username(&name)
        .map_err(|m| Failure::bad_input(anyhow!("{m}")))?;
    toolshed_server::routes::auth::check_username(&tenant)
        .map_err(|m| Failure::bad_input(anyhow!("--tenant: {m}")))?;
    let role: Role = role.parse().map_err(auth_failure)?;
    let password = match password {
        Some(p) => p,
        None => {
            prompt::new_password(&format!("password for {name}: ")).map_err(Failure::bad_input)?
        }
    };
    let hash = tokio::task::spawn_blocking(move || toolshed_auth::hash_password(&password))
        .await
        .map_err(|e| Failure::Error {
            code: EXIT_INTERNAL,
            error: anyhow!("password hashing failed: {e}"),
        })?
        .map_err(auth_failure)?;
    let store = open(database_url).await?;
    let user = store
        .create_user(NewUser {
            username: name,
            password_hash: hash,
            role,
            tenant,
        })
        .await
        .map_err(registry_failure)?;
    if json_out {
        print_json(&user_json(&user));
    } else {
        print(&format!(
            "added user {} (role {}, tenant {}); they log in with `toolshed login --username {}`",
            user.username, user.role, user.tenant, user.username
        ));
    }
    Ok(())
}

async fn list(database_url: &str, json_out: bool) -> Result<(), Failure> {
    let store = open(database_url).await?;
    let users = store
        .list_users(&toolshed_registry::TenantScope::All)
        .await
        .map_err(registry_failure)?;
    if json_out {
        print_json(&Value::Array(users.iter().map(user_json).collect()));
        return Ok(());
    }
    let rows: Vec<Vec<String>> = users
        .iter()
        .map(|u| {
            vec![
                u.username.clone(),
                u.role.to_string(),
                u.tenant.clone(),
                time(u.created_at_ms),
            ]
        })
        .collect();
    print(&table(&["USER", "ROLE", "TENANT", "CREATED"], &rows, 40));
    Ok(())
}

async fn open(database_url: &str) -> Result<Arc<dyn RegistryStore>, Failure> {
    toolshed_registry::open(database_url)
        .await
        .map_err(registry_failure)
}

/// A user as `--json` prints it: never the hash.
fn user_json(u: &UserRecord) -> Value {
    json!({
        "username": u.username,
        "role": u.role,
        "tenant": u.tenant,
        "created_at": time(u.created_at_ms),
    })
}

fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// The exit code for an auth error: a weak password or an unknown role is bad input.
fn auth_failure(e: AuthError) -> Failure {
    let code = match e {
        AuthError::WeakPassword | AuthError::InvalidRole(_) => EXIT_BAD_INPUT,
        _ => EXIT_INTERNAL,
    };
    Failure::Error {
        code,
        error: anyhow!("{e} [{}]", e.code()),
    }
}

/// The exit code for a registry error: a bad URL or a taken name is bad input; an
/// unavailable database is 3.
fn registry_failure(e: RegistryError) -> Failure {
    let code = match e {
        RegistryError::InvalidUrl { .. } | RegistryError::Conflict(_) => EXIT_BAD_INPUT,
        RegistryError::NotFound { .. } => EXIT_BAD_INPUT,
        _ => EXIT_INTERNAL,
    };
    Failure::Error {
        code,
        error: anyhow!("{e} [{}]", e.code()),
    }
}
