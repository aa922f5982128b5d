//! [`Readers`] (the read side of either database) and [`Db`] (readers plus one
//! transactional write connection): what a store holds to run its rules.

use std::path::Path;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use crate::error::{DbError, OpenError};
use crate::location::Location;
use crate::migrate::Migrations;
use crate::sql::{Dialect, Executor};
use crate::{pg, sqlite};

/// The read side of a store's database.
#[derive(Debug, Clone)]
pub enum Readers {
    /// Pooled SQLite connections on the blocking threads.
    Sqlite(Arc<sqlite::Readers>),
    /// Pipelined PostgreSQL connections.
    Postgres(Arc<pg::Readers>),
}

impl Readers {
    /// SQLite readers of `path`: at most `max` at once.
    pub fn sqlite(path: &Path, noun: &'static str, max: usize, statement_cache: usize) -> Self {
        Readers::Sqlite(Arc::new(sqlite::Readers::new(
            path,
            noun,
            max,
            statement_cache,
        )))
    }

    /// The dialect of the database.
    pub fn dialect(&self) -> Dialect {
        match self {
            Readers::Sqlite(_) => Dialect::Sqlite,
            Readers::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Run a rule on a read connection. Rules must only read: SQLite's read
    /// connections refuse writes (`query_only`); on PostgreSQL a read connection is
    /// shared, so a rule must not begin a transaction on it.
    pub async fn read<T, E, F>(&self, rule: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<DbError> + From<OpenError> + Send + 'static,
        F: for<'c> FnOnce(&'c mut dyn Executor) -> BoxFuture<'c, Result<T, E>> + Send + 'static,
    {
        match self {
            Readers::Sqlite(readers) => readers.read(rule).await,
            Readers::Postgres(readers) => readers.read(rule).await,
        }
    }
}

/// How many read connections a [`Db`] opens, and what it calls itself.
#[derive(Debug, Clone, Copy)]
pub struct DbOptions {
    /// The PostgreSQL `application_name`.
    pub application_name: &'static str,
    /// SQLite reads at once (each on its own connection).
    pub sqlite_readers: usize,
    /// PostgreSQL read connections (each pipelines many reads).
    pub postgres_readers: usize,
    /// Prepared statements cached per SQLite connection.
    pub statement_cache: usize,
}

#[derive(Debug)]
enum Writer {
    Sqlite(sqlite::Writer),
    Postgres(Box<pg::Writer>),
}

/// A store's database: the read side, and one write connection on which each write is
/// one transaction. For stores whose writes are rare (the registry); a store with hot
/// writes groups them itself and uses only [`Readers`].
#[derive(Debug)]
pub struct Db {
    readers: Readers,
    writer: Writer,
    described: String,
    applied: Vec<u32>,
}

impl Db {
    /// Open (creating and migrating) the store's database at `location`.
    pub async fn open(
        location: &Location,
        migrations: &'static Migrations,
        options: DbOptions,
    ) -> Result<Db, OpenError> {
        match location {
            Location::Sqlite { path } => {
                let open_path = path.clone();
                let (conn, applied) = tokio::task::spawn_blocking(move || {
                    sqlite::open_writer(&open_path, migrations)
                })
                .await
                .map_err(|e| sqlite::unavailable(path, format!("opening failed: {e}")))??;
                Ok(Db {
                    readers: Readers::sqlite(
                        path,
                        migrations.noun,
                        options.sqlite_readers,
                        options.statement_cache,
                    ),
                    writer: Writer::Sqlite(sqlite::Writer::new(path, conn)),
                    described: location.describe(),
                    applied,
                })
            }
            Location::Postgres { url, schema } => {
                let target = Arc::new(pg::Target::new(
                    url,
                    schema.as_deref(),
                    options.application_name,
                )?);
                let (client, applied) = target.open(migrations).await?;
                let readers =
                    pg::Readers::connect(Arc::clone(&target), options.postgres_readers).await?;
                Ok(Db {
                    readers: Readers::Postgres(Arc::new(readers)),
                    described: target.describe().to_owned(),
                    writer: Writer::Postgres(Box::new(pg::Writer::new(target, client))),
                    applied,
                })
            }
        }
    }

    /// The schema versions this open applied: empty when the database was up to date.
    pub fn applied_migrations(&self) -> &[u32] {
        &self.applied
    }

    /// The database for messages (password masked).
    pub fn describe(&self) -> &str {
        &self.described
    }

    /// The dialect of the database.
    pub fn dialect(&self) -> Dialect {
        self.readers.dialect()
    }

    /// How many write transactions hold the write connection now (0 or 1), for metrics
    /// and for tests that show reads do not wait for writes.
    pub fn writes_in_transaction(&self) -> u64 {
        match &self.writer {
            Writer::Sqlite(writer) => writer.in_transaction(),
            Writer::Postgres(writer) => writer.in_transaction(),
        }
    }

    /// Run a read-only rule.
    pub async fn read<T, E, F>(&self, rule: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<DbError> + From<OpenError> + Send + 'static,
        F: for<'c> FnOnce(&'c mut dyn Executor) -> BoxFuture<'c, Result<T, E>> + Send + 'static,
    {
        self.readers.read(rule).await
    }

    /// Run a rule in one write transaction: committed when it returns `Ok`, rolled back
    /// when it returns `Err`. Writes run one at a time.
    pub async fn write<T, E, F>(&self, rule: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<DbError> + From<OpenError> + Send + 'static,
        F: for<'c> FnOnce(&'c mut dyn Executor) -> BoxFuture<'c, Result<T, E>> + Send + 'static,
    {
        match &self.writer {
            Writer::Sqlite(writer) => writer.write(rule).await,
            Writer::Postgres(writer) => writer.write(rule).await,
        }
    }
}
