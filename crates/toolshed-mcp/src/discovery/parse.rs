//! Reading one client's config file into raw server entries, with errors that name the
//! file, line, column and field.
//!
//! The file's top level is read with the server entries kept as raw JSON slices of the
//! text, then each entry on its own: a broken entry skips that server only, and its
//! error's position is translated back from the slice to the file.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;

/// One server entry as the clients write it (the union of their formats; fields we do
/// not use, such as `autoApprove` or `cwd`, are ignored).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RawEntry {
    /// `stdio`, `http`, `streamable-http`, `sse`; absent: from `command` or `url`.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// The program of a stdio server.
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// Its environment.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// The endpoint of an HTTP server.
    #[serde(default)]
    pub url: Option<String>,
    /// Its headers.
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// Cursor's and Cline's switch: the user turned the server off.
    #[serde(default)]
    pub disabled: Option<bool>,
}

/// A problem at a place in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// The field, e.g. `mcpServers.zendesk.args` (empty for a syntax error).
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

/// One entry of a file: its name, where it sits (`mcpServers.zendesk`), and the entry
/// or why it is broken.
pub type Entry = (String, String, Result<RawEntry, Located>);

/// The file's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `{"mcpServers": {NAME: ENTRY}}`: `.mcp.json`, Claude Desktop, Cursor.
    McpServers,
    /// `~/.claude.json`: `mcpServers` (user scope) and
    /// `projects.<path>.mcpServers` for the project folder.
    ClaudeJson,
    /// `.vscode/mcp.json`: `{"servers": {NAME: ENTRY}, "inputs": [...]}`.
    VsCode,
}

/// What one file holds.
#[derive(Debug, Default)]
pub struct FileEntries {
    /// The user-scoped (or only) entries.
    pub entries: Vec<Entry>,
    /// `~/.claude.json`'s entries for the project folder (project scope).
    pub project_entries: Vec<Entry>,
    /// VS Code's input ids.
    pub inputs: Vec<String>,
}

#[derive(Deserialize)]
struct McpServersTop<'a> {
    #[serde(rename = "mcpServers", borrow, default)]
    mcp_servers: Option<BTreeMap<String, &'a RawValue>>,
}

#[derive(Deserialize)]
struct ClaudeJsonTop<'a> {
    #[serde(rename = "mcpServers", borrow, default)]
    mcp_servers: Option<BTreeMap<String, &'a RawValue>>,
    #[serde(borrow, default)]
    projects: Option<BTreeMap<String, &'a RawValue>>,
}

#[derive(Deserialize)]
struct VsCodeTop<'a> {
    #[serde(borrow, default)]
    servers: Option<BTreeMap<String, &'a RawValue>>,
    #[serde(default)]
    inputs: Option<Vec<VsCodeInput>>,
}

#[derive(Deserialize)]
struct VsCodeInput {
    id: String,
}

/// Reads `text` (plain JSON; JSONC already stripped) of `shape`. `project_keys` are the
/// spellings of the project folder `~/.claude.json`'s `projects` may use.
pub fn read(text: &str, shape: Shape, project_keys: &[String]) -> Result<FileEntries, Located> {
    let mut out = FileEntries::default();
    match shape {
        Shape::McpServers => {
            let top: McpServersTop = top(text)?;
            out.entries = entries(text, "mcpServers", top.mcp_servers);
        }
        Shape::ClaudeJson => {
            let top: ClaudeJsonTop = top(text)?;
            out.entries = entries(text, "mcpServers", top.mcp_servers);
            for (key, raw) in top.projects.unwrap_or_default() {
                if !project_keys.contains(&key) {
                    continue;
                }
                let at = format!("projects.{key}");
                let project: McpServersTop = sub(text, raw, &at)?;
                out.project_entries =
                    entries(text, &format!("{at}.mcpServers"), project.mcp_servers);
            }
        }
        Shape::VsCode => {
            let top: VsCodeTop = top(text)?;
            out.entries = entries(text, "servers", top.servers);
            out.inputs = top
                .inputs
                .unwrap_or_default()
                .into_iter()
                .map(|i| i.id)
                .collect();
        }
    }
    Ok(out)
}

fn top<'a, T: Deserialize<'a>>(text: &'a str) -> Result<T, Located> {
    // serde's derived structs also accept an array of fields; a config is an object.
    let start = text.len() - text.trim_start().len();
    if let Some(first) = text[start..].chars().next()
        && first != '{'
    {
        let before = &text[..start];
        return Err(Located {
            line: before.matches('\n').count() + 1,
            column: start - before.rfind('\n').map_or(0, |p| p + 1) + 1,
            field: String::new(),
            reason: format!("expected a JSON object, found {first:?}"),
        });
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| located(text, 0, "", e))?;
    de.end().map_err(|e| located_plain(text, 0, "", &e))?;
    Ok(value)
}

fn sub<'a, T: Deserialize<'a>>(text: &str, raw: &'a RawValue, at: &str) -> Result<T, Located> {
    let slice = raw.get();
    let mut de = serde_json::Deserializer::from_str(slice);
    serde_path_to_error::deserialize(&mut de)
        .map_err(|e| located(text, offset_of(text, slice), at, e))
}

fn entries(text: &str, at: &str, map: Option<BTreeMap<String, &RawValue>>) -> Vec<Entry> {
    map.unwrap_or_default()
        .into_iter()
        .map(|(name, raw)| {
            let at = format!("{at}.{name}");
            let entry = sub::<RawEntry>(text, raw, &at);
            (name, at, entry)
        })
        .collect()
}

/// Where `slice` (borrowed from `text`) starts in `text`.
fn offset_of(text: &str, slice: &str) -> usize {
    (slice.as_ptr() as usize)
        .checked_sub(text.as_ptr() as usize)
        .filter(|o| *o <= text.len())
        .unwrap_or(0)
}

fn located(
    text: &str,
    base: usize,
    at: &str,
    e: serde_path_to_error::Error<serde_json::Error>,
) -> Located {
    let path = e.path().to_string();
    let field = match (at.is_empty(), path.as_str()) {
        (_, ".") => at.to_owned(),
        (true, p) => p.to_owned(),
        (false, p) if p.starts_with('[') => format!("{at}{p}"),
        (false, p) => format!("{at}.{p}"),
    };
    let mut l = located_plain(text, base, &field, e.inner());
    l.reason = explain(&field, &l.reason);
    l
}

fn located_plain(text: &str, base: usize, field: &str, e: &serde_json::Error) -> Located {
    // serde_json's line and column are 1-based within what it read (a slice of `text`
    // starting at `base`); turn them into the file's.
    let slice = &text[base..];
    let mut offset = 0;
    for _ in 1..e.line() {
        match slice[offset..].find('\n') {
            Some(n) => offset += n + 1,
            None => break,
        }
    }
    let absolute = (base + offset + e.column().saturating_sub(1)).min(text.len());
    let before = &text.as_bytes()[..absolute];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |p| p + 1);
    let column = absolute - line_start + 1;
    let message = e.to_string();
    let reason = match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message,
    };
    Located {
        line: if e.line() == 0 { 0 } else { line },
        column: if e.line() == 0 { 0 } else { column },
        field: field.to_owned(),
        reason,
    }
}

/// serde's "invalid type: integer `3`, expected a sequence" in the words of the field.
fn explain(field: &str, reason: &str) -> String {
    let Some(found) = reason
        .strip_prefix("invalid type: ")
        .and_then(|r| r.split(", expected").next())
    else {
        return reason.to_owned();
    };
    let last = field.rsplit('.').next().unwrap_or(field);
    let last = last.split('[').next().unwrap_or(last);
    let expected = if field.ends_with(']') {
        "expected a string"
    } else {
        match last {
            "args" => "expected an array of strings",
            "env" | "headers" => "expected an object of string values",
            "command" | "url" | "type" | "id" => "expected a string",
            "mcpServers" | "servers" => "expected an object of servers by name",
            "inputs" => "expected an array of inputs",
            _ => return reason.to_owned(),
        }
    };
    format!("{expected}, found {found}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_entry_names_its_line_and_field() {
        let text = "{\n  \"mcpServers\": {\n    \"ok\": {\"command\": \"x\"},\n    \"zendesk\": {\"command\": \"x\",\n      \"args\": \"not-an-array\"}\n  }\n}";
        let f = read(text, Shape::McpServers, &[]).unwrap();
        let (name, at, e) = &f.entries[1];
        assert_eq!(
            (name.as_str(), at.as_str()),
            ("zendesk", "mcpServers.zendesk")
        );
        let e = e.as_ref().unwrap_err();
        assert_eq!(e.field, "mcpServers.zendesk.args");
        assert_eq!(e.line, 5);
        assert!(
            e.reason.starts_with("expected an array of strings"),
            "{}",
            e.reason
        );
        assert!(f.entries[0].2.is_ok());
    }

    #[test]
    fn an_element_of_args_is_named_by_index() {
        let text = "{\"mcpServers\": {\"a\": {\"args\": [\"x\", 3]}}}";
        let f = read(text, Shape::McpServers, &[]).unwrap();
        let e = f.entries[0].2.as_ref().unwrap_err();
        assert_eq!(e.field, "mcpServers.a.args[1]");
        assert_eq!((e.line, e.column), (1, 37));
    }

    #[test]
    fn a_syntax_error_has_line_and_column() {
        let e = read(
            "{\n \"mcpServers\": {\n  \"a\": {,}\n}}",
            Shape::McpServers,
            &[],
        )
        .unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.column > 0);
    }

    #[test]
    fn claude_json_reads_only_this_projects_entries() {
        let text = r#"{"mcpServers": {"u": {"command": "x"}},
          "projects": {"/p": {"mcpServers": {"p": {"command": "y"}}},
                       "/other": {"mcpServers": {"o": {"command": 3}}}}}"#;
        let f = read(text, Shape::ClaudeJson, &["/p".into()]).unwrap();
        assert_eq!(f.entries.len(), 1);
        assert_eq!(f.project_entries.len(), 1);
        assert_eq!(f.project_entries[0].1, "projects./p.mcpServers.p");
    }
}
