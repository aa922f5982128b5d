//! Variable expansion in config values: `${VAR}`, `${VAR:-default}`, `${env:VAR}` (VS
//! Code), and VS Code's `${input:ID}`, `${workspaceFolder}` and `${userHome}`.
//!
//! Where a value sits decides what a variable becomes. In `command`, `args` and `url`
//! it is replaced by its value. In `env` and `headers` (where secrets live) a variable
//! the environment sets stays a `${NAME}` credential reference, and NAME goes into the
//! spec's credentials: the client resolves it through the credential provider when it
//! connects, so the value is never printed and never registered.

use std::path::PathBuf;

/// Where a value sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// `command`, `args`, `url`: variables are replaced by their values.
    Plain,
    /// `env` and `headers` values: variables from the environment stay references.
    Secret,
}

/// VS Code's own variables, for `.vscode/mcp.json`.
#[derive(Debug, Clone)]
pub struct VsCodeVars {
    /// `${workspaceFolder}`.
    pub workspace_folder: PathBuf,
    /// `${userHome}`.
    pub user_home: PathBuf,
    /// The ids of the file's `inputs`, which `${input:ID}` may name.
    pub inputs: Vec<String>,
}

/// Expands variables from `env`.
pub struct Expander<'a> {
    /// Reads one environment variable.
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// Set for VS Code's files.
    pub vscode: Option<&'a VsCodeVars>,
}

/// One expanded value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expanded {
    /// The value, with credential references in secret positions.
    pub value: String,
    /// The credential names it references.
    pub credentials: Vec<String>,
    /// Whether a value from the environment was put in (in a plain position): such a
    /// value is not printed.
    pub from_env: bool,
}

/// Why a value cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpandError {
    /// `${VAR}` without a default, and VAR is not set.
    Missing(String),
    /// A form we do not know, e.g. `${command:x}`.
    Unsupported(String),
    /// A variable that would become a credential reference has a name credentials
    /// cannot have.
    BadCredentialName(String),
    /// `${input:ID}` names no entry of `inputs`, or sits in a plain position.
    Input(String),
}

impl Expander<'_> {
    /// Expands `text` at `position`. An unterminated `${` is kept as written.
    pub fn expand(&self, text: &str, position: Position) -> Result<Expanded, ExpandError> {
        let mut out = Expanded::default();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            let Some(len) = rest[start + 2..].find('}') else {
                break;
            };
            out.value.push_str(&rest[..start]);
            let expr = &rest[start + 2..start + 2 + len];
            self.one(expr, position, &mut out)?;
            rest = &rest[start + 2 + len + 1..];
        }
        out.value.push_str(rest);
        out.credentials.sort();
        out.credentials.dedup();
        Ok(out)
    }

    fn one(&self, expr: &str, position: Position, out: &mut Expanded) -> Result<(), ExpandError> {
        if let Some(vs) = self.vscode {
            match expr {
                "workspaceFolder" => {
                    out.value.push_str(&vs.workspace_folder.to_string_lossy());
                    return Ok(());
                }
                "userHome" => {
                    out.value.push_str(&vs.user_home.to_string_lossy());
                    return Ok(());
                }
                _ => {}
            }
            if let Some(id) = expr.strip_prefix("input:") {
                // VS Code prompts for inputs (API keys, mostly); we cannot, so an input is
                // a credential of the same name, resolved when the server starts.
                if position == Position::Plain || !vs.inputs.iter().any(|i| i == id) {
                    return Err(ExpandError::Input(id.to_owned()));
                }
                toolshed_core::credentials::check_segment(id)
                    .map_err(|_| ExpandError::BadCredentialName(id.to_owned()))?;
                out.value.push_str(&format!("${{{id}}}"));
                out.credentials.push(id.to_owned());
                return Ok(());
            }
        }
        let expr = expr.strip_prefix("env:").unwrap_or(expr);
        let (name, default) = match expr.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (expr, None),
        };
        if !is_var_name(name) {
            return Err(ExpandError::Unsupported(format!("${{{expr}}}")));
        }
        match ((self.env)(name), default) {
            (Some(value), _) => match position {
                Position::Plain => {
                    out.value.push_str(&value);
                    out.from_env = true;
                }
                Position::Secret => {
                    toolshed_core::credentials::check_segment(name)
                        .map_err(|_| ExpandError::BadCredentialName(name.to_owned()))?;
                    out.value.push_str(&format!("${{{name}}}"));
                    out.credentials.push(name.to_owned());
                }
            },
            (None, Some(default)) => out.value.push_str(default),
            (None, None) => return Err(ExpandError::Missing(name.to_owned())),
        }
        Ok(())
    }
}

fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "HOME" => Some("/home/u".into()),
            "TOKEN" => Some("s3cret".into()),
            _ => None,
        }
    }

    fn check(text: &str, position: Position, expect: Result<(&str, &[&str]), ExpandError>) {
        let vs = VsCodeVars {
            workspace_folder: "/w".into(),
            user_home: "/home/u".into(),
            inputs: vec!["api-key".into()],
        };
        let x = Expander {
            env: &env,
            vscode: Some(&vs),
        };
        let got = x.expand(text, position).map(|e| (e.value, e.credentials));
        let expect =
            expect.map(|(v, c)| (v.to_owned(), c.iter().map(|s| (*s).to_owned()).collect()));
        assert_eq!(got, expect, "{text}");
    }

    #[test]
    fn plain_positions_take_values() {
        check("${HOME}/x", Position::Plain, Ok(("/home/u/x", &[])));
        check("${env:HOME}", Position::Plain, Ok(("/home/u", &[])));
        check(
            "${NOPE:-d}/${HOME:-x}",
            Position::Plain,
            Ok(("d//home/u", &[])),
        );
        check("${NOPE:-}", Position::Plain, Ok(("", &[])));
        check("${workspaceFolder}/a", Position::Plain, Ok(("/w/a", &[])));
        check(
            "no vars ${ unterminated",
            Position::Plain,
            Ok(("no vars ${ unterminated", &[])),
        );
    }

    #[test]
    fn secret_positions_keep_references() {
        check(
            "Bearer ${TOKEN}",
            Position::Secret,
            Ok(("Bearer ${TOKEN}", &["TOKEN"])),
        );
        check(
            "${env:TOKEN}${TOKEN}",
            Position::Secret,
            Ok(("${TOKEN}${TOKEN}", &["TOKEN"])),
        );
        check("${NOPE:-public}", Position::Secret, Ok(("public", &[])));
        check(
            "${input:api-key}",
            Position::Secret,
            Ok(("${api-key}", &["api-key"])),
        );
    }

    #[test]
    fn missing_and_unknown_forms_are_errors() {
        check(
            "${NOPE}",
            Position::Plain,
            Err(ExpandError::Missing("NOPE".into())),
        );
        check(
            "${env:NOPE}",
            Position::Secret,
            Err(ExpandError::Missing("NOPE".into())),
        );
        check(
            "${command:x}",
            Position::Plain,
            Err(ExpandError::Unsupported("${command:x}".into())),
        );
        check(
            "${input:other}",
            Position::Secret,
            Err(ExpandError::Input("other".into())),
        );
        check(
            "${input:api-key}",
            Position::Plain,
            Err(ExpandError::Input("api-key".into())),
        );
    }
}
