//! Where a store lives: a database URL parsed once, and passwords masked for messages.

use std::path::PathBuf;

use crate::error::OpenError;

/// A parsed database URL.
#[derive(Clone, PartialEq, Eq)]
pub enum Location {
    /// `sqlite://PATH`: one file (relative paths are from the working folder), created on
    /// first use.
    Sqlite {
        /// The file.
        path: PathBuf,
    },
    /// `postgres://…` or `postgresql://…`, optionally with the tables in their own schema.
    Postgres {
        /// The URL as given (keep it out of messages: use [`Location::describe`]).
        url: String,
        /// The schema to create (if missing) and use; `None` uses the connection's
        /// `search_path`.
        schema: Option<String>,
    },
}

impl std::fmt::Debug for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Location {
    /// Parse `sqlite://PATH`, `postgres://…` or `postgresql://…`. Anything else, or an
    /// empty path, is `InvalidUrl` with the fix.
    pub fn parse(url: &str) -> Result<Location, OpenError> {
        if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(OpenError::InvalidUrl {
                    url: mask_password(url),
                    reason: "the path is missing: use `sqlite://PATH`, e.g. `sqlite://toolshed.db`"
                        .into(),
                });
            }
            Ok(Location::Sqlite {
                path: PathBuf::from(path),
            })
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Location::Postgres {
                url: url.to_owned(),
                schema: None,
            })
        } else {
            Err(OpenError::InvalidUrl {
                url: mask_password(url),
                reason: "use `sqlite://PATH` or `postgres://USER@HOST:PORT/DB`".into(),
            })
        }
    }

    /// The same PostgreSQL location with its tables in `schema` (created if missing).
    /// An empty schema name is `InvalidUrl`; a SQLite location is returned unchanged.
    pub fn in_schema(self, schema: &str) -> Result<Location, OpenError> {
        match self {
            Location::Postgres { url, .. } => {
                if schema.is_empty() {
                    return Err(OpenError::InvalidUrl {
                        url: mask_password(&url),
                        reason: "the schema name is empty".into(),
                    });
                }
                Ok(Location::Postgres {
                    url,
                    schema: Some(schema.to_owned()),
                })
            }
            sqlite => Ok(sqlite),
        }
    }

    /// The location for messages: `sqlite://PATH`, or the URL with its password masked
    /// and the schema named.
    pub fn describe(&self) -> String {
        match self {
            Location::Sqlite { path } => format!("sqlite://{}", path.display()),
            Location::Postgres { url, schema: None } => mask_password(url),
            Location::Postgres {
                url,
                schema: Some(schema),
            } => format!("{} (schema `{schema}`)", mask_password(url)),
        }
    }
}

/// What stands for a URL that cannot be parsed but may hold a password.
const UNREADABLE: &str =
    "(a database URL that cannot be parsed; not shown, it may hold a password)";

/// Hide the password of a URL for messages: the userinfo password and a `password=…`
/// query parameter become `***`. A URL that is not valid, but might carry a password
/// (it has an `@` or says `password`), is not shown at all.
pub fn mask_password(url: &str) -> String {
    let Ok(mut parsed) = url::Url::parse(url) else {
        let lower = url.to_ascii_lowercase();
        return if url.contains('@') || lower.contains("password") {
            UNREADABLE.to_owned()
        } else {
            url.to_owned()
        };
    };
    let mut changed = false;
    if parsed.password().is_some() {
        if parsed.set_password(Some("***")).is_err() {
            return UNREADABLE.to_owned();
        }
        changed = true;
    }
    if parsed
        .query_pairs()
        .any(|(key, _)| key.eq_ignore_ascii_case("password"))
    {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(key, value)| {
                let value = if key.eq_ignore_ascii_case("password") {
                    "***".to_owned()
                } else {
                    value.into_owned()
                };
                (key.into_owned(), value)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
        changed = true;
    }
    if changed {
        parsed.to_string()
    } else {
        url.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_passwords_in_userinfo_and_query() {
        assert_eq!(
            mask_password("postgres://u:s3cret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(
            mask_password("postgres://u@h/db?password=s3cret&x=1"),
            "postgres://u@h/db?password=***&x=1"
        );
        assert_eq!(mask_password("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(mask_password("sqlite:///tmp/a.db"), "sqlite:///tmp/a.db");
        assert_eq!(
            mask_password("sqlite://toolshed.db"),
            "sqlite://toolshed.db"
        );
    }

    #[test]
    fn an_unparseable_url_with_a_password_is_not_shown() {
        let masked = mask_password("postgres://u:s3cret@[bad");
        assert!(!masked.contains("s3cret"), "{masked}");
        assert_eq!(mask_password("not a url"), "not a url");
    }

    #[test]
    fn locations_parse_and_describe_without_passwords() {
        assert_eq!(
            Location::parse("sqlite://a/b.db").unwrap(),
            Location::Sqlite {
                path: "a/b.db".into()
            }
        );
        let pg = Location::parse("postgresql://u:pw@h/db")
            .unwrap()
            .in_schema("s1")
            .unwrap();
        assert_eq!(pg.describe(), "postgresql://u:***@h/db (schema `s1`)");
        for bad in ["sqlite://", "mysql://h/db", "toolshed.db"] {
            assert!(matches!(
                Location::parse(bad),
                Err(OpenError::InvalidUrl { .. })
            ));
        }
        assert!(matches!(
            Location::parse("postgres://h/db").unwrap().in_schema(""),
            Err(OpenError::InvalidUrl { .. })
        ));
    }
}
