//! # toolshed-store
//!
//! The storage layer below every toolshed store (the journal, the registry, and what comes
//! next): one place for what each of them would otherwise write twice.
//!
//! - [`Location`]: a database URL parsed once (`sqlite://PATH` or `postgres://…`), with
//!   passwords masked in every message ([`mask_password`]).
//! - [`sqlite`]: opening a file (refusing someone else's database), WAL and pragmas, the
//!   pool of read connections.
//! - [`pg`]: connecting with a bounded wait and a search path, and the pipelined read
//!   connections with their prepared-statement caches.
//! - [`migrate`]: one migration runner over embedded `.sql` files per dialect, keyed in
//!   the shared `toolshed_meta` table, so stores sharing a database migrate in any order.
//! - [`sql`]: statements written once ([`Sql`], [`Param`], [`Row`]) and the
//!   [`Executor`] a store's rules run over, whatever the database.
//! - [`Db`]: the read pool plus one transactional write connection, for stores whose
//!   writes are rare (the journal, whose writes are hot, keeps its own group-commit
//!   writer and uses only the read side).
//!
//! A store's rule is an `async fn` over `&mut dyn Executor` that issues statements and
//! decides; each backend only runs statements. The same rule therefore holds on SQLite
//! and PostgreSQL, and adding a rule means one function plus one statement per dialect
//! (often the same text: statements are written with SQLite's `?N` placeholders, which
//! the PostgreSQL side rewrites to `$N`).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use toolshed_store::{Db, DbOptions, Location, Migration, Migrations, Sql};
//!
//! const NOTES: Migrations = Migrations {
//!     store: "notes",
//!     noun: "database",
//!     version_key: "notes_schema_version",
//!     format: None,
//!     steps: &[Migration {
//!         version: 1,
//!         sqlite: "CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT NOT NULL) STRICT;",
//!         postgres: "CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT NOT NULL);",
//!     }],
//! };
//! const INSERT: Sql = Sql::same("INSERT INTO notes (id, body) VALUES (?1, ?2)");
//! const BODY: Sql = Sql::same("SELECT body FROM notes WHERE id = ?1");
//!
//! let dir = tempfile::tempdir()?;
//! let location = Location::parse(&format!("sqlite://{}", dir.path().join("t.db").display()))?;
//! let options = DbOptions { application_name: "example", sqlite_readers: 2, postgres_readers: 1, statement_cache: 16 };
//! let db = Db::open(&location, &NOTES, options).await?;
//! db.write(|tx| Box::pin(async move {
//!     tx.run(&INSERT, &["n1".into(), "hello".into()]).await
//! })).await?;
//! let body: Option<String> = db.read(|r| Box::pin(async move {
//!     match r.row(&BODY, &["n1".into()]).await? {
//!         Some(row) => Ok::<_, toolshed_store::DbError>(Some(row.get(0)?)),
//!         None => Ok(None),
//!     }
//! })).await?;
//! assert_eq!(body.as_deref(), Some("hello"));
//! # Ok(())
//! # }
//! ```

mod db;
mod error;
mod location;
pub mod migrate;
pub mod pg;
pub mod sql;
pub mod sqlite;
#[cfg(feature = "testing")]
pub mod testing;
pub mod time;

pub use db::{Db, DbOptions, Readers};
pub use error::{DbError, DbErrorKind, OpenError};
pub use location::{Location, mask_password};
pub use migrate::{Migration, Migrations};
pub use sql::{Dialect, Executor, Param, Query, Row, Sql};
