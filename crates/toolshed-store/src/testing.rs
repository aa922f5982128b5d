//! Test support for the stores' behavioural suites (feature `testing`): a scratch
//! database per test, a SQLite file in a temporary folder or a fresh PostgreSQL schema
//! on the local server (dropped when the test ends, even when it panics).
//!
//! PostgreSQL comes from `TOOLSHED_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); when it does not answer, the test fails
//! and says how to start it.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::future::Future;
use std::path::PathBuf;

use crate::location::{Location, mask_password};

/// The server the PostgreSQL tests use unless `TOOLSHED_TEST_POSTGRES_URL` says otherwise.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The PostgreSQL URL of the tests.
pub fn postgres_url() -> String {
    std::env::var("TOOLSHED_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_owned())
}

/// Where one test's store lives; open it as often as the test likes.
pub enum Scratch {
    /// A file in a temporary folder (removed with the value).
    Sqlite {
        /// Keeps the folder alive.
        dir: tempfile::TempDir,
        /// The file (not created yet).
        path: PathBuf,
    },
    /// A schema of its own on the test server.
    Postgres {
        /// The server.
        url: String,
        /// The schema (created by the store when it opens).
        schema: String,
    },
}

impl Scratch {
    /// Where a store should open.
    pub fn location(&self) -> Location {
        match self {
            Scratch::Sqlite { path, .. } => Location::Sqlite { path: path.clone() },
            Scratch::Postgres { url, schema } => Location::Postgres {
                url: url.clone(),
                schema: Some(schema.clone()),
            },
        }
    }

    /// Whether this is the SQLite scratch.
    pub fn is_sqlite(&self) -> bool {
        matches!(self, Scratch::Sqlite { .. })
    }
}

/// A connection for setting up and dropping schemas; fails the test with the fix when
/// PostgreSQL is not running.
pub async fn admin() -> tokio_postgres::Client {
    let url = postgres_url();
    match tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
        Ok((client, connection)) => {
            tokio::spawn(connection);
            client
        }
        Err(e) => panic!(
            "PostgreSQL is not reachable at {} ({}). Start it with \
             `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`, \
             or point TOOLSHED_TEST_POSTGRES_URL at a server (trust auth, database `test`)",
            mask_password(&url),
            crate::pg::message(&e)
        ),
    }
}

/// A schema name no other test uses.
pub fn fresh_schema() -> String {
    format!("toolshed_test_{}", uuid::Uuid::new_v4().simple())
}

/// Run `test` on a scratch SQLite file.
pub async fn on_sqlite<F, Fut>(test: F)
where
    F: FnOnce(Scratch) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolshed.db");
    test(Scratch::Sqlite { dir, path }).await;
}

/// Run `test` in a fresh PostgreSQL schema, dropped afterwards.
pub async fn on_postgres<F, Fut>(test: F)
where
    F: FnOnce(Scratch) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    with_schema(|_admin, schema| {
        test(Scratch::Postgres {
            url: postgres_url(),
            schema,
        })
    })
    .await;
}

/// Run `test` with an admin connection and a fresh schema name (the schema is not
/// created), then drop the schema. The test runs as a task so that its panic can be
/// caught, the schema dropped, and the panic resumed.
pub async fn with_schema<F, Fut>(test: F)
where
    F: FnOnce(tokio_postgres::Client, String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let schema = fresh_schema();
    let outcome = tokio::spawn(test(admin().await, schema.clone())).await;
    admin()
        .await
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .await
        .unwrap();
    if let Err(e) = outcome {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
        panic!("the test task failed: {e}");
    }
}
