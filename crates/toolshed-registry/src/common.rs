//! What both backends share: paging, ids, clocks, name-prefix ranges and the messages
//! of errors callers see, so that SQLite and PostgreSQL answer alike.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::{MAX_PER_PAGE, RegistryError};

/// Items per page when the caller asks for 0.
pub(crate) const DEFAULT_PER_PAGE: u32 = 20;

/// The `toolshed_meta` key holding the registry's schema version.
pub(crate) const SCHEMA_VERSION_KEY: &str = "registry_schema_version";

/// A page request as applied: page from 1, per_page in 1..=MAX_PER_PAGE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Paging {
    pub(crate) page: u32,
    pub(crate) per_page: u32,
}

impl Paging {
    /// Apply the defaults and the cap.
    pub(crate) fn new(page: u32, per_page: u32) -> Paging {
        let per_page = match per_page {
            0 => DEFAULT_PER_PAGE,
            n => n.min(MAX_PER_PAGE),
        };
        Paging {
            page: page.max(1),
            per_page,
        }
    }

    /// `LIMIT`.
    pub(crate) fn limit(self) -> i64 {
        i64::from(self.per_page)
    }

    /// `OFFSET` (at most about 2^41, no overflow).
    pub(crate) fn offset(self) -> i64 {
        i64::from(self.page - 1) * i64::from(self.per_page)
    }
}

/// A fresh id: a UUID v7 (time-ordered, so ids sort roughly by creation).
pub(crate) fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The smallest string greater than every string starting with `prefix`, if any: the
/// prefix with its last incrementable character incremented and the rest dropped.
/// Names are compared by code point in both backends (SQLite's `BINARY`, PostgreSQL's
/// `"C"` collation on UTF-8), so `name >= prefix AND name < upper` is exactly "starts
/// with `prefix`", and it is an index range rather than a scan.
pub(crate) fn prefix_upper_bound(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match last {
            // Skip the surrogate range, which `char` cannot hold.
            '\u{D7FF}' => Some('\u{E000}'),
            c => char::from_u32(u32::from(c) + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Tool lookups answer "not found" for deleted tools too.
pub(crate) fn tool_not_found(id: &str) -> RegistryError {
    RegistryError::NotFound {
        what: "tool",
        id: id.to_owned(),
    }
}

pub(crate) fn agent_not_found(id: &str) -> RegistryError {
    RegistryError::NotFound {
        what: "agent",
        id: id.to_owned(),
    }
}

pub(crate) fn user_not_found(username: &str) -> RegistryError {
    RegistryError::NotFound {
        what: "user",
        id: username.to_owned(),
    }
}

/// An active tool already has the name (`holder`: its id, when known).
pub(crate) fn name_taken(name: &str, holder: Option<&str>) -> RegistryError {
    let id = holder.map(|id| format!(" (id {id})")).unwrap_or_default();
    RegistryError::Conflict(format!(
        "a tool named `{name}` is already registered{id}; update it with PUT or delete it first"
    ))
}

pub(crate) fn stale_revision(name: &str, current: u32, expected: u32) -> RegistryError {
    RegistryError::Conflict(format!(
        "tool `{name}` is at revision {current}, not {expected}: reload it and try again"
    ))
}

pub(crate) fn user_taken(username: &str) -> RegistryError {
    RegistryError::Conflict(format!("user `{username}` already exists"))
}

/// A newer registry schema than this build knows.
pub(crate) fn check_version(version: u32, latest: u32) -> Result<(), String> {
    if version > latest {
        return Err(format!(
            "its registry schema version {version} is newer than this toolshed supports ({latest}); \
             upgrade toolshed"
        ));
    }
    Ok(())
}

/// The tool ids an agent uses: sorted, without duplicates.
pub(crate) fn normalized_tool_ids(ids: &[String]) -> Vec<String> {
    let mut ids = ids.to_vec();
    ids.sort();
    ids.dedup();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paging_defaults_and_caps() {
        assert_eq!(
            Paging::new(0, 0),
            Paging {
                page: 1,
                per_page: 20
            }
        );
        assert_eq!(Paging::new(3, 10_000).per_page, MAX_PER_PAGE);
        assert_eq!(Paging::new(3, 10).offset(), 20);
        assert_eq!(
            Paging::new(u32::MAX, MAX_PER_PAGE).offset(),
            i64::from(u32::MAX - 1) * 500
        );
    }

    #[test]
    fn prefix_bounds() {
        assert_eq!(prefix_upper_bound("abc").as_deref(), Some("abd"));
        assert_eq!(prefix_upper_bound("").as_deref(), None);
        assert_eq!(
            prefix_upper_bound("a\u{10FFFF}").as_deref(),
            Some("b"),
            "a maximal last character is dropped and the one before incremented"
        );
        assert_eq!(prefix_upper_bound("\u{D7FF}").as_deref(), Some("\u{E000}"));
        assert_eq!(prefix_upper_bound("\u{10FFFF}"), None);
    }
}
