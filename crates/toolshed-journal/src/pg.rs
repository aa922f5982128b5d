//! PostgreSQL connection plumbing shared by the journal and the registry store (which
//! lives in the same database): connecting with a bounded wait and the search path set,
//! naming the server in messages, and the driver's errors as readable text.

use std::time::Duration;

use tokio_postgres::{Client, Config, NoTls};

/// How long one connection attempt may take when the URL sets no `connect_timeout`.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection config from a URL, with [`CONNECT_TIMEOUT`] and `application_name`
/// filled in where the URL sets none. The error is the reason the URL is refused.
pub fn config(url: &str, application_name: &str) -> Result<Config, String> {
    let mut config: Config = url.parse().map_err(|e| format!("{e}"))?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    if config.get_application_name().is_none() {
        config.application_name(application_name);
    }
    Ok(config)
}

/// Create `schema` if it is missing (two processes doing so at once is fine).
pub async fn create_schema(client: &Client, schema: &str) -> Result<(), String> {
    let create = format!("CREATE SCHEMA IF NOT EXISTS {}", quote_ident(schema));
    match client.batch_execute(&create).await {
        // Another connection may have created it at the same moment.
        Err(e) if e.code() != Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
            Err(format!("cannot create schema `{schema}`: {}", message(&e)))
        }
        _ => Ok(()),
    }
}

/// Open a connection, spawn its driver task (its end is logged with `what`, e.g.
/// `journal`) and set `search_path` to `schema` when one is given. The error is the
/// message for an "unavailable" error: it names the server and asks whether it runs.
pub async fn connect(config: &Config, schema: Option<&str>, what: &str) -> Result<Client, String> {
    // The connect timeout applies per address; this bounds the whole attempt.
    let deadline = config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_TIMEOUT)
        * 2;
    let (client, connection) = match tokio::time::timeout(deadline, config.connect(NoTls)).await {
        Ok(Ok(connected)) => connected,
        Ok(Err(e)) => {
            return Err(format!(
                "{} (is PostgreSQL running at {}?)",
                message(&e),
                endpoint(config)
            ));
        }
        Err(_) => {
            return Err(format!(
                "no answer within {} s (is PostgreSQL running at {}?)",
                deadline.as_secs(),
                endpoint(config)
            ));
        }
    };
    let what = what.to_owned();
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %message(&e), "a PostgreSQL {what} connection ended");
        }
    });
    if let Some(schema) = schema {
        client
            .batch_execute(&format!("SET search_path TO {}", quote_ident(schema)))
            .await
            .map_err(|e| format!("cannot set the search path: {}", message(&e)))?;
    }
    Ok(client)
}

/// The servers of a config as `host:port` text, for messages.
pub fn endpoint(config: &Config) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports
                .get(i)
                .or_else(|| ports.first())
                .copied()
                .unwrap_or(5432);
            match host {
                tokio_postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(dir) => {
                    format!("{} (port {port})", dir.display())
                }
            }
        })
        .collect();
    if hosts.is_empty() {
        "localhost:5432".to_owned()
    } else {
        hosts.join(", ")
    }
}

/// The driver's message with its causes (a server error's own text and code, not just
/// "db error").
pub fn message(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut message = format!("{} ({})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            message.push_str(": ");
            message.push_str(detail);
        }
        return message;
    }
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// `"name"`, with inner quotes doubled.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
