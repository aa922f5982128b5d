//! The two errors of the storage layer: [`OpenError`] (a database cannot be opened or
//! is not ours) and [`DbError`] (a statement failed), each store mapping them onto its
//! own error kinds and stable codes. Driver errors of both databases become one
//! [`DbErrorKind`], so a rule can say "a unique index refused this" once.

/// Why a database could not be opened. Every URL in it has its password masked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The URL is not `sqlite://PATH` or `postgres://…`.
    #[error("invalid database URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL, password masked.
        url: String,
        /// Why, and what to write instead.
        reason: String,
    },
    /// The database cannot be reached, created or migrated.
    #[error("cannot open `{target}`: {message}")]
    Unavailable {
        /// The file or the masked URL.
        target: String,
        /// What went wrong (the driver's words, with a hint where there is one).
        message: String,
    },
    /// The file exists but is not a toolshed database (or not a database at all).
    #[error("`{path}` is not a toolshed {noun}: {message}")]
    Foreign {
        /// The file.
        path: String,
        /// What the store calls itself in this message (`journal`, `database`).
        noun: &'static str,
        /// What was found.
        message: String,
    },
}

/// What kind of failure a statement had, the same for both databases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DbErrorKind {
    /// A unique index or primary key refused the row.
    UniqueViolation,
    /// A foreign key refused the row.
    ForeignKeyViolation,
    /// Another connection or process holds the lock (SQLite's busy timeout ran out).
    Busy,
    /// The connection to the server is gone; the outcome of the statement is unknown.
    ConnectionLost,
    /// A column held something the reader did not expect (a corrupt or foreign row).
    Decode,
    /// Anything else the driver reported.
    Other,
}

/// A failed statement or transaction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DbError {
    /// What kind of failure.
    pub kind: DbErrorKind,
    /// The driver's message (no passwords: statements never carry them).
    pub message: String,
}

impl DbError {
    /// An error of `kind`.
    pub fn new(kind: DbErrorKind, message: impl Into<String>) -> Self {
        DbError {
            kind,
            message: message.into(),
        }
    }

    /// A column that could not be read as expected.
    pub fn decode(message: impl Into<String>) -> Self {
        DbError::new(DbErrorKind::Decode, message)
    }

    /// Whether a unique index refused the row (a name taken, an id reused).
    pub fn is_unique_violation(&self) -> bool {
        self.kind == DbErrorKind::UniqueViolation
    }
}

impl From<OpenError> for DbError {
    /// A connection that could not be (re)opened for a statement.
    fn from(e: OpenError) -> Self {
        let kind = match e {
            OpenError::Unavailable { .. } => DbErrorKind::ConnectionLost,
            _ => DbErrorKind::Other,
        };
        DbError::new(kind, e.to_string())
    }
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        let kind = match &e {
            rusqlite::Error::SqliteFailure(f, _) => match f.code {
                ErrorCode::ConstraintViolation => match f.extended_code {
                    rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                    | rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY => DbErrorKind::UniqueViolation,
                    rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY => DbErrorKind::ForeignKeyViolation,
                    _ => DbErrorKind::Other,
                },
                ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => DbErrorKind::Busy,
                _ => DbErrorKind::Other,
            },
            rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::Utf8Error(..) => DbErrorKind::Decode,
            _ => DbErrorKind::Other,
        };
        let message = match kind {
            DbErrorKind::Busy => format!("the database is locked by another process: {e}"),
            _ => e.to_string(),
        };
        DbError { kind, message }
    }
}

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> Self {
        use tokio_postgres::error::SqlState;
        let kind = if e.is_closed() {
            DbErrorKind::ConnectionLost
        } else {
            match e.code() {
                Some(c) if *c == SqlState::UNIQUE_VIOLATION => DbErrorKind::UniqueViolation,
                Some(c) if *c == SqlState::FOREIGN_KEY_VIOLATION => {
                    DbErrorKind::ForeignKeyViolation
                }
                Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE => DbErrorKind::Busy,
                _ => DbErrorKind::Other,
            }
        };
        let message = crate::pg::message(&e);
        let message = match kind {
            DbErrorKind::ConnectionLost => format!("the connection was lost: {message}"),
            _ => message,
        };
        DbError { kind, message }
    }
}
