//! The storage layer's promises, each test run on both databases (SQLite on a temporary
//! file, PostgreSQL in a fresh schema of the local server): a rule that fails is rolled
//! back whole; driver errors map to one kind; values round-trip as bound; reads never
//! wait for a write; a write whose caller gave up leaves no transaction open; and a
//! SQLite rule that awaits anything but its executor is reported, not hung.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::json;
use toolshed_store::testing::{Scratch, on_postgres, on_sqlite};
use toolshed_store::{Db, DbError, DbErrorKind, DbOptions, Migration, Migrations, Param, Sql};

static NOTES: Migrations = Migrations {
    store: "notes",
    noun: "database",
    version_key: "notes_schema_version",
    format: None,
    steps: &[Migration {
        version: 1,
        sqlite: "CREATE TABLE notes (id TEXT NOT NULL PRIMARY KEY, n INTEGER, x REAL, \
                 body TEXT, doc TEXT) STRICT;",
        postgres: "CREATE TABLE notes (id TEXT NOT NULL PRIMARY KEY, n BIGINT, \
                   x DOUBLE PRECISION, body TEXT, doc JSONB);",
    }],
};

const OPTIONS: DbOptions = DbOptions {
    application_name: "toolshed-store-test",
    sqlite_readers: 2,
    postgres_readers: 1,
    statement_cache: 16,
};

const INSERT: Sql =
    Sql::same("INSERT INTO notes (id, n, x, body, doc) VALUES (?1, ?2, ?3, ?4, ?5)");
const ONE: Sql = Sql::same("SELECT id, n, x, body, doc FROM notes WHERE id = ?1 OR body = ?1");
const COUNT: Sql = Sql::same("SELECT COUNT(*) FROM notes");

async fn open(scratch: &Scratch) -> Db {
    Db::open(&scratch.location(), &NOTES, OPTIONS)
        .await
        .expect("open the test database")
}

fn note(id: &str) -> Vec<Param> {
    vec![
        id.into(),
        7_i64.into(),
        2.5_f64.into(),
        Param::Null,
        Param::Json(json!({"tags": ["a", "b"], "n": 1.0})),
    ]
}

async fn count(db: &Db) -> i64 {
    db.read(|r| Box::pin(async move { r.row(&COUNT, &[]).await?.unwrap().get::<i64>(0) }))
        .await
        .map_err(|e: DbError| e)
        .unwrap()
}

macro_rules! both {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    toolshed_store::testing::on_sqlite(super::$test).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    toolshed_store::testing::on_postgres(super::$test).await;
                }
            )*
        }
    };
}

both!(
    a_failing_rule_is_rolled_back_whole,
    unique_violations_have_their_kind,
    values_round_trip_as_bound,
    reads_never_wait_for_a_write,
    opening_twice_migrates_once,
);

async fn a_failing_rule_is_rolled_back_whole(scratch: Scratch) {
    let db = open(&scratch).await;
    let result: Result<(), DbError> = db
        .write(|tx| {
            Box::pin(async move {
                tx.run(&INSERT, &note("n1")).await?;
                tx.run(&INSERT, &note("n2")).await?;
                Err(DbError::new(DbErrorKind::Other, "the rule says no"))
            })
        })
        .await;
    assert_eq!(result.unwrap_err().message, "the rule says no");
    assert_eq!(count(&db).await, 0, "nothing of a failed rule is stored");
    // The write connection is usable again, and a rule that succeeds is committed.
    db.write(|tx| Box::pin(async move { tx.run(&INSERT, &note("n3")).await }))
        .await
        .unwrap();
    assert_eq!(count(&db).await, 1);
}

async fn unique_violations_have_their_kind(scratch: Scratch) {
    let db = open(&scratch).await;
    db.write(|tx| Box::pin(async move { tx.run(&INSERT, &note("n1")).await }))
        .await
        .unwrap();
    let err = db
        .write(|tx| Box::pin(async move { tx.run(&INSERT, &note("n1")).await }))
        .await
        .unwrap_err();
    assert_eq!(err.kind, DbErrorKind::UniqueViolation, "{err}");
    assert!(err.is_unique_violation());
    // A statement the database refuses for another reason is `Other`, with its words.
    let err = db
        .write(|tx| {
            Box::pin(async move { tx.run(&Sql::same("SELECT * FROM no_such_table"), &[]).await })
        })
        .await
        .unwrap_err();
    assert_eq!(err.kind, DbErrorKind::Other);
    assert!(err.message.contains("no_such_table"), "{err}");
}

async fn values_round_trip_as_bound(scratch: Scratch) {
    let db = open(&scratch).await;
    db.write(|tx| Box::pin(async move { tx.run(&INSERT, &note("n1")).await }))
        .await
        .unwrap();
    // `?1` stands twice in ONE; PostgreSQL gets `$1` twice.
    let row = db
        .read(|r| Box::pin(async move { r.row(&ONE, &["n1".into()]).await }))
        .await
        .map_err(|e: DbError| e)
        .unwrap()
        .expect("the row");
    assert_eq!(row.get::<String>(0).unwrap(), "n1");
    assert_eq!(row.get::<i64>(1).unwrap(), 7);
    assert_eq!(row.get::<f64>(2).unwrap(), 2.5);
    assert_eq!(row.get::<Option<String>>(3).unwrap(), None);
    assert_eq!(
        row.get::<serde_json::Value>(4).unwrap(),
        json!({"tags": ["a", "b"], "n": 1.0})
    );
    let err = row.get::<i64>(0).unwrap_err();
    assert_eq!(err.kind, DbErrorKind::Decode);
}

async fn reads_never_wait_for_a_write(scratch: Scratch) {
    let db = std::sync::Arc::new(open(&scratch).await);
    db.write(|tx| Box::pin(async move { tx.run(&INSERT, &note("n1")).await }))
        .await
        .unwrap();
    // Another connection holds the lock the next write needs: SQLite's write lock, or
    // PostgreSQL's lock on the row it updates.
    let holder = Holder::hold(&scratch).await;
    let write = tokio::spawn({
        let db = std::sync::Arc::clone(&db);
        async move {
            db.write(|tx| {
                Box::pin(async move {
                    tx.run(&Sql::same("UPDATE notes SET n = 8 WHERE id = 'n1'"), &[])
                        .await
                })
            })
            .await
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while db.writes_in_transaction() == 0 {
        assert!(Instant::now() < deadline, "the write never began");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let read = tokio::time::timeout(Duration::from_secs(10), count(&db))
        .await
        .expect("a read answers while a write holds the write connection");
    assert_eq!(read, 1);
    assert!(
        !write.is_finished(),
        "the write was still waiting for its lock while the read answered"
    );
    holder.release().await;
    assert_eq!(write.await.unwrap().unwrap(), 1);
}

async fn opening_twice_migrates_once(scratch: Scratch) {
    let first = open(&scratch).await;
    assert_eq!(first.applied_migrations(), [1]);
    let second = open(&scratch).await;
    assert!(second.applied_migrations().is_empty());
    assert_eq!(count(&second).await, 0);
}

/// Holds, from another connection, the lock the test's write needs.
enum Holder {
    Sqlite(rusqlite::Connection),
    Postgres(tokio_postgres::Client),
}

impl Holder {
    async fn hold(scratch: &Scratch) -> Holder {
        match scratch {
            Scratch::Sqlite { path, .. } => {
                let conn = rusqlite::Connection::open(path).unwrap();
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                Holder::Sqlite(conn)
            }
            Scratch::Postgres { url, schema } => {
                let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(connection);
                client
                    .batch_execute(&format!(
                        "SET search_path TO \"{schema}\"; BEGIN; \
                         SELECT 1 FROM notes WHERE id = 'n1' FOR UPDATE"
                    ))
                    .await
                    .unwrap();
                Holder::Postgres(client)
            }
        }
    }

    async fn release(self) {
        match self {
            Holder::Sqlite(conn) => conn.execute_batch("ROLLBACK").unwrap(),
            Holder::Postgres(client) => client.batch_execute("ROLLBACK").await.unwrap(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_rule_awaiting_something_else_is_a_bug_not_a_hang() {
    on_sqlite(|scratch| async move {
        let db = open(&scratch).await;
        let err = db
            .write(|tx| {
                Box::pin(async move {
                    tx.run(&INSERT, &note("n1")).await?;
                    tokio::task::yield_now().await;
                    Ok::<_, DbError>(())
                })
            })
            .await
            .unwrap_err();
        assert!(err.message.contains("awaited something other"), "{err}");
        assert_eq!(count(&db).await, 0, "the rule was rolled back");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_write_whose_caller_gave_up_leaves_no_transaction_open() {
    on_postgres(|scratch| async move {
        let db = open(&scratch).await;
        // The caller stops waiting while the rule is inside its transaction.
        let gave_up = tokio::time::timeout(
            Duration::from_millis(300),
            db.write(|tx| {
                Box::pin(async move {
                    tx.run(&INSERT, &note("n1")).await?;
                    tx.run(&Sql::same("SELECT pg_sleep(1)"), &[]).await?;
                    Ok::<_, DbError>(())
                })
            }),
        )
        .await;
        assert!(gave_up.is_err(), "the write was cut short");
        // The next write starts clean: the abandoned insert is not committed with it.
        db.write(|tx| Box::pin(async move { tx.run(&INSERT, &note("n2")).await }))
            .await
            .unwrap();
        let ids: Vec<String> = db
            .read(|r| {
                Box::pin(async move {
                    r.rows(&Sql::same("SELECT id FROM notes ORDER BY id"), &[])
                        .await?
                        .iter()
                        .map(|row| row.get(0))
                        .collect::<Result<Vec<String>, DbError>>()
                })
            })
            .await
            .unwrap();
        assert_eq!(ids, ["n2"]);
    })
    .await;
}

/// The database file, its WAL and its shared-memory file are the owner's alone (0600),
/// whatever the umask would give (0644 under the usual 022), and a folder made for them
/// is 0700: they hold password hashes, the signing secret and every run's data.
#[tokio::test]
async fn a_new_sqlite_database_its_wal_and_shm_are_created_0600() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new-folder").join("toolshed.db");
    let location =
        toolshed_store::Location::parse(&format!("sqlite://{}", path.display())).unwrap();
    let db = Db::open(&location, &NOTES, OPTIONS).await.unwrap();
    db.write(|tx| Box::pin(async move { tx.run(&INSERT, &note("n1")).await }))
        .await
        .map_err(|e: DbError| e)
        .unwrap();
    assert_eq!(count(&db).await, 1);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for suffix in ["", "-wal", "-shm"] {
        let file = std::path::PathBuf::from(format!("{}{suffix}", path.display()));
        assert!(file.exists(), "{} was not created", file.display());
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    assert_eq!(mode(&dir.path().join("new-folder")), 0o700);
}
