//! One migration runner for every store and both dialects.
//!
//! A store embeds its migrations (`include_str!` of `migrations/sqlite/NNNN_*.sql` and
//! `migrations/postgres/NNNN_*.sql`) as [`Migrations`]. Its schema version lives under its
//! own key of the shared `toolshed_meta` table, so several stores share one database and
//! open it in any order. Migrations run in one transaction that holds the database's
//! write lock (SQLite's `BEGIN IMMEDIATE`, PostgreSQL's advisory lock on the schema), so
//! two processes opening a new database at once migrate it once. A database written by a
//! newer toolshed is refused instead of being changed.

use crate::error::OpenError;

/// The DDL both dialects run first: whichever store opens the database first creates it.
pub(crate) const META_SQLITE: &str = "CREATE TABLE IF NOT EXISTS toolshed_meta \
     (key TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL) STRICT";
/// The same for PostgreSQL.
pub(crate) const META_POSTGRES: &str =
    "CREATE TABLE IF NOT EXISTS toolshed_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)";

/// One schema version: its DDL in each dialect.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// The version this step brings the schema to (1, 2, …, in order).
    pub version: u32,
    /// The SQLite DDL (several statements allowed).
    pub sqlite: &'static str,
    /// The PostgreSQL DDL (several statements allowed).
    pub postgres: &'static str,
}

/// A store's migrations and how it names itself in messages.
#[derive(Debug, Clone, Copy)]
pub struct Migrations {
    /// The store, for messages and logs: `journal`, `registry`.
    pub store: &'static str,
    /// What a foreign file is said not to be: "not a toolshed {noun}".
    pub noun: &'static str,
    /// The `toolshed_meta` key of the schema version, e.g. `registry_schema_version`.
    pub version_key: &'static str,
    /// A record-format version kept beside the schema version (key, the version this
    /// build writes); a database whose format is newer is refused.
    pub format: Option<(&'static str, u32)>,
    /// The steps, in version order.
    pub steps: &'static [Migration],
}

impl Migrations {
    /// The newest schema version this build knows.
    pub fn latest(&self) -> u32 {
        self.steps.last().map_or(0, |m| m.version)
    }

    /// What the stored version is called in messages: `schema version` for the journal
    /// (the first store), `registry schema version` for the others.
    fn version_name(&self) -> String {
        if self.version_key == "schema_version" {
            "schema version".to_owned()
        } else {
            format!("{} schema version", self.store)
        }
    }

    /// Refuse a database written by a newer toolshed: the reason, for `Unavailable`.
    pub(crate) fn check(&self, schema: u32, format: Option<u32>) -> Result<(), String> {
        let latest = self.latest();
        if schema > latest {
            return Err(format!(
                "its {} {schema} is newer than this toolshed supports ({latest}); upgrade toolshed",
                self.version_name()
            ));
        }
        if let (Some((key, ours)), Some(stored)) = (self.format, format)
            && stored > ours
        {
            return Err(format!(
                "its record {} {stored} is newer than this toolshed supports ({ours}); upgrade toolshed",
                key.replace('_', " ")
            ));
        }
        Ok(())
    }

    /// The steps newer than `version`.
    pub(crate) fn pending(&self, version: u32) -> impl Iterator<Item = &Migration> {
        self.steps.iter().filter(move |m| m.version > version)
    }

    /// The `toolshed_meta` rows to write after migrating: the schema version, and the
    /// format version if the store keeps one.
    pub(crate) fn meta_rows(&self) -> Vec<(&'static str, String)> {
        let mut rows = vec![(self.version_key, self.latest().to_string())];
        if let Some((key, version)) = self.format {
            rows.push((key, version.to_string()));
        }
        rows
    }

    /// A stored version that is not a number.
    pub(crate) fn invalid(&self, key: &str, value: &str) -> String {
        format!("toolshed_meta has an invalid {key} `{value}`")
    }
}

/// Parse a stored version.
pub(crate) fn parse_version(m: &Migrations, key: &str, value: &str) -> Result<u32, String> {
    value.parse::<u32>().map_err(|_| m.invalid(key, value))
}

/// `Unavailable` for a migration step that failed.
pub(crate) fn step_failed(target: &str, m: &Migrations, version: u32, e: &str) -> OpenError {
    OpenError::Unavailable {
        target: target.to_owned(),
        message: format!("{} migration {version} failed: {e}", m.store),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: Migrations = Migrations {
        store: "registry",
        noun: "database",
        version_key: "registry_schema_version",
        format: Some(("format_version", 1)),
        steps: &[
            Migration {
                version: 1,
                sqlite: "",
                postgres: "",
            },
            Migration {
                version: 2,
                sqlite: "",
                postgres: "",
            },
        ],
    };

    #[test]
    fn newer_versions_are_refused_with_their_names() {
        assert_eq!(M.latest(), 2);
        assert!(M.check(2, Some(1)).is_ok());
        assert_eq!(
            M.check(9, None).unwrap_err(),
            "its registry schema version 9 is newer than this toolshed supports (2); upgrade toolshed"
        );
        assert_eq!(
            M.check(1, Some(5)).unwrap_err(),
            "its record format version 5 is newer than this toolshed supports (1); upgrade toolshed"
        );
        assert_eq!(M.pending(1).map(|m| m.version).collect::<Vec<_>>(), [2]);
    }
}
