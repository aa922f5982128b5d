//! Declared environment values: checked once at start-up, all missing names reported
//! together, then handed to handlers through the context (never raw `std::env`).

use std::collections::BTreeMap;

/// Declared env variables that are not set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "missing environment variable{}: {}; set {} before starting",
    if .missing.len() == 1 { "" } else { "s" },
    .missing.join(", "),
    if .missing.len() == 1 { "it" } else { "them" }
)]
pub struct MissingEnv {
    /// Every missing name, in declaration order.
    pub missing: Vec<String>,
}

/// Read every declared name through `lookup`; fail with the full list of missing names.
pub fn resolve_declared_env<'a>(
    declared: impl IntoIterator<Item = &'a str>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, String>, MissingEnv> {
    let mut found = BTreeMap::new();
    let mut missing = Vec::new();
    for name in declared {
        match lookup(name) {
            Some(v) if !v.is_empty() => {
                found.insert(name.to_owned(), v);
            }
            _ => missing.push(name.to_owned()),
        }
    }
    if missing.is_empty() {
        Ok(found)
    } else {
        Err(MissingEnv { missing })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_every_missing_name() {
        let err =
            resolve_declared_env(["A", "B", "C"], |n| (n == "B").then(|| "x".into())).unwrap_err();
        assert_eq!(err.missing, vec!["A", "C"]);
        assert_eq!(
            err.to_string(),
            "missing environment variables: A, C; set them before starting"
        );
        let ok = resolve_declared_env(["B"], |_| Some("v".into())).unwrap();
        assert_eq!(ok["B"], "v");
    }
}
