//! Output helpers: tables for people, JSON for scripts, a quiet exit on a closed pipe,
//! and the failure type that carries an exit code.
//!
//! Text for people goes through `toolshed_core::text::for_display`: a tool's
//! description, output or stderr, or a server's message, may carry terminal escapes (a
//! window title, a clipboard write, cursor moves, concealed text), bidi overrides or
//! invisible characters, which show as `\u{…}` instead of acting on the terminal. JSON
//! (`--json`) is written as it is.

use std::io::Write;

/// Exit code: a call ended in an error result (the tool's, or toolshed's for it), or the
/// run failed; for every command that drives a run (`tools run`, `runs start`,
/// `runs resume`, `registry tool run`, `registry resume`).
pub const EXIT_TOOL_ERROR: u8 = 1;
/// Exit code: bad input (usage, unknown tool, invalid args or file).
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit code: an internal error, or the journal cannot be reached.
pub const EXIT_INTERNAL: u8 = 3;
/// Exit code: the run parked, waiting for a person.
pub const EXIT_PARKED: u8 = 4;

/// Why a command failed, with the exit code to use.
#[derive(Debug)]
pub enum Failure {
    /// The failure was already printed.
    Reported(u8),
    /// An error to print as `error: …` with its cause chain.
    Error {
        /// The exit code.
        code: u8,
        /// What went wrong.
        error: anyhow::Error,
    },
}

impl Failure {
    /// Bad input, with a message.
    pub fn bad_input(error: impl Into<anyhow::Error>) -> Self {
        Failure::Error {
            code: EXIT_BAD_INPUT,
            error: error.into(),
        }
    }
}

/// Write text for people to stdout, escapes and hidden characters shown as `\u{…}`; a
/// closed pipe (`toolshed … | head`) ends the process quietly.
pub fn print(text: &str) {
    print_raw(&toolshed_core::text::for_display(text));
}

/// [`print()`] for stderr: a diagnostic that may quote a tool or a server.
pub fn eprint(text: &str) {
    eprintln!("{}", toolshed_core::text::for_display(text));
}

/// Write to stdout as it is (JSON, or a snippet meant for a file).
pub fn print_raw(text: &str) {
    let mut out = std::io::stdout().lock();
    let result = out
        .write_all(text.as_bytes())
        .and_then(|()| {
            if text.ends_with('\n') {
                Ok(())
            } else {
                out.write_all(b"\n")
            }
        })
        .and_then(|()| out.flush());
    if let Err(e) = result {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(i32::from(EXIT_INTERNAL));
    }
}

/// Print a JSON value, pretty, as it is (strings keep every character; JSON escapes
/// the control ones).
pub fn print_json(value: &serde_json::Value) {
    print_raw(&serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()));
}

/// Render rows as an aligned table with a header; the last column is not padded and is
/// cut to `max_last` characters. Cells are shown as [`print()`] shows text (escapes and
/// hidden characters as `\u{…}`), before their widths are measured.
pub fn table(header: &[&str], rows: &[Vec<String>], max_last: usize) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|c| toolshed_core::text::for_display(c).into_owned())
                .collect()
        })
        .collect();
    let rows = rows.as_slice();
    let cols = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(cols.saturating_sub(1)) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<String>| {
        let mut parts = Vec::with_capacity(cols);
        for (i, cell) in cells.into_iter().enumerate() {
            if i + 1 == cols {
                parts.push(cut(&cell, max_last));
            } else {
                parts.push(format!("{cell:<width$}", width = widths[i]));
            }
        }
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(header.iter().map(|h| (*h).to_owned()).collect());
    for row in rows {
        line(row.clone());
    }
    out
}

fn cut(text: &str, max: usize) -> String {
    let first_line = text.lines().next().unwrap_or("");
    if first_line.chars().count() <= max {
        first_line.to_owned()
    } else {
        let mut s: String = first_line.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

/// Warnings for people about characters a tool's definition hides: one line per field
/// and kind, e.g. `warning: read_file: description: 6 tag characters (shown as \u{…})`.
pub fn hidden_warnings(tool: &str, found: &[toolshed_core::text::HiddenText]) -> String {
    found
        .iter()
        .map(|h| {
            format!(
                "warning: {tool}: {} a reader does not see (shown as \\u{{…}})\n",
                h.describe()
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_cells_show_escapes_as_text_and_keep_their_widths() {
        let text = table(
            &["NAME", "DESCRIPTION"],
            &[vec!["a\u{1b}]0;t\u{7}".into(), "x\u{202e}y".into()]],
            80,
        );
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{202e}'),
            "{text:?}"
        );
        assert!(text.contains("a\\u{1b}]0;t\\u{7}  x\\u{202e}y"), "{text}");
    }
}
