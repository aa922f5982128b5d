//! Output helpers: tables for people, JSON for scripts, a quiet exit on a closed pipe,
//! and the failure type that carries an exit code.

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

/// Write to stdout; a closed pipe (`toolshed … | head`) ends the process quietly.
pub fn print(text: &str) {
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

/// Print a JSON value, pretty.
pub fn print_json(value: &serde_json::Value) {
    print(&serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string()));
}

/// Render rows as an aligned table with a header; the last column is not padded and is
/// cut to `max_last` characters.
pub fn table(header: &[&str], rows: &[Vec<String>], max_last: usize) -> String {
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
