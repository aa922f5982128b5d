//! Endpoints: where a tool's implementation lives, parsed from strings such as
//! `python:/srv/tools/order_lookup.py:order_lookup`.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::DispatchError;

/// Where a tool's implementation lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `builtin:<name>`: a Rust tool handed to [`crate::Dispatcher::with_builtins`].
    Builtin {
        /// The built-in tool's name.
        name: String,
    },
    /// `python:<abs_path>[:fn]`: a function in a Python file, run by the Python runner.
    Python {
        /// The absolute path of the `.py` file.
        path: PathBuf,
        /// The function; defaults to the file stem.
        function: String,
    },
    /// `node:<abs_path>[:export]`: an exported function of a `.js`, `.mjs`, `.cjs`, `.ts`
    /// or `.mts` file, run by the Node runner (TypeScript is transpiled once, cached).
    Node {
        /// The absolute path of the module.
        path: PathBuf,
        /// The export; `None` means the default export, falling back to the export
        /// named like the file stem.
        export: Option<String>,
    },
    /// `exec:<abs_path>`: any executable speaking the wire protocol on stdin/stdout.
    Exec {
        /// The absolute path of the executable.
        path: PathBuf,
    },
    /// `http://…` / `https://…`: a service that takes `{"tool", "args", "context"}` as a
    /// JSON POST and answers the result as JSON.
    Http {
        /// The URL.
        url: String,
    },
}

/// The file extensions a `node:` endpoint accepts.
pub const NODE_EXTENSIONS: &[&str] = &["js", "mjs", "cjs", "ts", "mts"];

impl Endpoint {
    /// Parse an endpoint string, checking that the file it names exists.
    ///
    /// ```
    /// use toolshed_dispatch::Endpoint;
    ///
    /// let ep = Endpoint::parse("builtin:get_current_time").unwrap();
    /// assert_eq!(ep.to_string(), "builtin:get_current_time");
    /// let err = Endpoint::parse("python:tools/x.py").unwrap_err();
    /// assert_eq!(err.code(), "INVALID_ENDPOINT");
    /// assert!(err.to_string().contains("absolute"));
    /// ```
    pub fn parse(s: &str) -> Result<Endpoint, DispatchError> {
        let invalid = |reason: String| DispatchError::InvalidEndpoint {
            endpoint: s.to_owned(),
            reason,
        };
        if s.trim().is_empty() {
            return Err(invalid("it is empty".into()));
        }
        if s.trim() != s {
            return Err(invalid("it has leading or trailing whitespace".into()));
        }
        if let Some(name) = s.strip_prefix("builtin:") {
            if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == ':') {
                return Err(invalid(format!(
                    "`{name}` is not a tool name; write builtin:<name>, e.g. builtin:get_current_time"
                )));
            }
            return Ok(Endpoint::Builtin {
                name: name.to_owned(),
            });
        }
        if let Some(rest) = s.strip_prefix("python:") {
            let (path, function) = split_target(rest);
            let path = absolute_file(s, path, &["py"], "python:/abs/path/tool.py[:function]")?;
            let function = match function {
                Some(f) if is_python_identifier(f) => f.to_owned(),
                Some(f) => {
                    return Err(invalid(format!("`{f}` is not a Python function name")));
                }
                None => {
                    let stem = file_stem(&path);
                    if !is_python_identifier(&stem) {
                        return Err(invalid(format!(
                            "the file stem `{stem}` is not a Python identifier, so name the \
                             function: python:{}:<function>",
                            path.display()
                        )));
                    }
                    stem
                }
            };
            return Ok(Endpoint::Python { path, function });
        }
        if let Some(rest) = s.strip_prefix("node:") {
            let (path, export) = split_target(rest);
            let path = absolute_file(
                s,
                path,
                NODE_EXTENSIONS,
                "node:/abs/path/tool.{js,mjs,cjs,ts,mts}[:export]",
            )?;
            let export = match export {
                Some(e) if is_js_identifier(e) => Some(e.to_owned()),
                Some(e) => {
                    return Err(invalid(format!("`{e}` is not a JavaScript export name")));
                }
                None => None,
            };
            return Ok(Endpoint::Node { path, export });
        }
        if let Some(rest) = s.strip_prefix("exec:") {
            let path = absolute_file(s, rest, &[], "exec:/abs/path/to/executable")?;
            if !is_executable(&path) {
                return Err(DispatchError::EndpointFileNotFound {
                    endpoint: s.to_owned(),
                    path,
                    problem: "is not executable: `chmod +x` it".into(),
                });
            }
            return Ok(Endpoint::Exec { path });
        }
        if s.starts_with("http://") || s.starts_with("https://") {
            return match reqwest::Url::parse(s) {
                Ok(url) if url.host_str().is_some_and(|h| !h.is_empty()) => {
                    Ok(Endpoint::Http { url: s.to_owned() })
                }
                Ok(_) => Err(invalid("the URL has no host".into())),
                Err(e) => Err(invalid(format!("not a valid URL ({e})"))),
            };
        }
        if s.starts_with("mcp:") {
            return Err(invalid(
                "`mcp:` endpoints are served by the MCP client, not by the dispatcher".into(),
            ));
        }
        let prefix = s.split_once(':').map(|(p, _)| p).unwrap_or(s);
        Err(invalid(if s.contains(':') {
            format!("`{prefix}:` is not a known prefix")
        } else {
            "it has no prefix".into()
        }))
    }

    /// The tool file, for file-based endpoints.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Endpoint::Python { path, .. }
            | Endpoint::Node { path, .. }
            | Endpoint::Exec { path } => Some(path),
            Endpoint::Builtin { .. } | Endpoint::Http { .. } => None,
        }
    }

    /// Whether the endpoint runs as a child process speaking the wire protocol.
    pub fn is_subprocess(&self) -> bool {
        self.path().is_some()
    }

    /// Whether a `node:` endpoint is TypeScript (`.ts`, `.mts`), which is transpiled
    /// once before it runs.
    pub fn is_typescript(&self) -> bool {
        match self {
            Endpoint::Node { path, .. } => is_typescript_path(path),
            _ => false,
        }
    }
}

/// Whether a Node tool file is TypeScript (`.ts`, `.mts`).
pub(crate) fn is_typescript_path(path: &Path) -> bool {
    matches!(extension(path).as_str(), "ts" | "mts")
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Builtin { name } => write!(f, "builtin:{name}"),
            Endpoint::Python { path, function } => {
                write!(f, "python:{}:{function}", path.display())
            }
            Endpoint::Node { path, export } => match export {
                Some(e) => write!(f, "node:{}:{e}", path.display()),
                None => write!(f, "node:{}", path.display()),
            },
            Endpoint::Exec { path } => write!(f, "exec:{}", path.display()),
            Endpoint::Http { url } => f.write_str(url),
        }
    }
}

impl std::str::FromStr for Endpoint {
    type Err = DispatchError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Endpoint::parse(s)
    }
}

/// Split `path[:name]`: a `:name` suffix counts only after the last `/`, so paths with
/// colons in a folder name still work.
fn split_target(rest: &str) -> (&str, Option<&str>) {
    let file_start = rest.rfind('/').map(|i| i + 1).unwrap_or(0);
    match rest[file_start..].rfind(':') {
        Some(i) => {
            let at = file_start + i;
            (&rest[..at], Some(&rest[at + 1..]))
        }
        None => (rest, None),
    }
}

fn absolute_file(
    endpoint: &str,
    path: &str,
    extensions: &[&str],
    form: &str,
) -> Result<PathBuf, DispatchError> {
    let invalid = |reason: String| DispatchError::InvalidEndpoint {
        endpoint: endpoint.to_owned(),
        reason,
    };
    if path.is_empty() {
        return Err(invalid(format!("no path given; write {form}")));
    }
    let p = PathBuf::from(path);
    if !p.is_absolute() {
        return Err(invalid(format!(
            "`{path}` is a relative path; endpoints need an absolute path ({form}) because \
             the tool runs from its own folder, whatever the caller's working folder"
        )));
    }
    if !extensions.is_empty() && !extensions.contains(&extension(&p).as_str()) {
        let list = extensions
            .iter()
            .map(|e| format!(".{e}"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(invalid(format!(
            "`{path}` does not end with {list}; write {form}"
        )));
    }
    match std::fs::metadata(&p) {
        Ok(m) if m.is_file() => Ok(p),
        Ok(_) => Err(DispatchError::EndpointFileNotFound {
            endpoint: endpoint.to_owned(),
            path: p,
            problem: "is not a file".into(),
        }),
        Err(_) => Err(DispatchError::EndpointFileNotFound {
            endpoint: endpoint.to_owned(),
            path: p,
            problem: "does not exist".into(),
        }),
    }
}

fn extension(p: &Path) -> String {
    p.extension()
        .and_then(|e| e.to_str())
        .unwrap_or_default()
        .to_owned()
}

pub(crate) fn file_stem(p: &Path) -> String {
    p.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
}

fn is_python_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
}

fn is_js_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c == '$' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c == '$' || c.is_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    fn err(s: &str) -> DispatchError {
        match Endpoint::parse(s) {
            Ok(ep) => panic!("{s} parsed as {ep:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn python_function_defaults_to_the_stem() {
        let path = fixture("order_lookup.py");
        let ep = Endpoint::parse(&format!("python:{path}")).unwrap();
        assert_eq!(
            ep,
            Endpoint::Python {
                path: path.clone().into(),
                function: "order_lookup".into()
            }
        );
        assert_eq!(ep.to_string(), format!("python:{path}:order_lookup"));
        assert_eq!(Endpoint::parse(&ep.to_string()).unwrap(), ep);
        let named = Endpoint::parse(&format!("python:{path}:other")).unwrap();
        assert!(matches!(named, Endpoint::Python { function, .. } if function == "other"));
    }

    #[test]
    fn node_export_is_optional_and_typescript_is_recognised() {
        let ep = Endpoint::parse(&format!("node:{}", fixture("greet.mjs"))).unwrap();
        assert!(matches!(&ep, Endpoint::Node { export: None, .. }));
        assert!(!ep.is_typescript());
        let ts = Endpoint::parse(&format!("node:{}:default", fixture("shout.ts"))).unwrap();
        assert!(ts.is_typescript());
        assert!(matches!(ts, Endpoint::Node { export: Some(e), .. } if e == "default"));
    }

    #[test]
    fn errors_name_the_problem_and_the_forms() {
        let e = err("python:tools/order_lookup.py");
        assert_eq!(e.code(), "INVALID_ENDPOINT");
        assert!(e.to_string().contains("relative path"), "{e}");
        assert!(e.to_string().contains("builtin:<name>"), "{e}");

        let e = err("python:/nowhere/tool.py");
        assert_eq!(e.code(), "ENDPOINT_FILE_NOT_FOUND");
        assert!(e.to_string().contains("does not exist"), "{e}");

        let e = err(&format!("python:{}", fixture("greet.mjs")));
        assert!(e.to_string().contains("does not end with .py"), "{e}");

        let e = err("ftp://example.com/tool");
        assert!(
            e.to_string().contains("`ftp:` is not a known prefix"),
            "{e}"
        );
        assert!(err("order_lookup").to_string().contains("no prefix"));
        assert!(err("mcp:server/tool").to_string().contains("MCP client"));
        assert!(err("builtin:").to_string().contains("not a tool name"));
        assert!(err("http://").to_string().contains("not a valid URL"));
        assert!(
            err(&format!("python:{}:1x", fixture("order_lookup.py")))
                .to_string()
                .contains("not a Python function name")
        );

        let e = err(&format!("exec:{}", fixture("order_lookup.py")));
        assert!(e.to_string().contains("not executable"), "{e}");
    }

    #[test]
    fn colons_in_folders_are_not_function_names() {
        assert_eq!(split_target("/a:b/c.py"), ("/a:b/c.py", None));
        assert_eq!(split_target("/a:b/c.py:f"), ("/a:b/c.py", Some("f")));
    }

    #[test]
    fn http_urls() {
        let ep = Endpoint::parse("https://tools.example.com/run").unwrap();
        assert_eq!(ep.to_string(), "https://tools.example.com/run");
        assert!(!ep.is_subprocess());
    }
}
