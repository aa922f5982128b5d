//! The console's copy of the one sanitiser (`toolshed_core::text`): `js/hidden.js`,
//! generated from [`toolshed_core::text::RANGES`] so the browser escapes exactly what
//! the CLI does. A test regenerates it and fails on drift;
//! `UPDATE_CONSOLE=1 cargo test -p toolshed-server --lib console::hidden` rewrites it.

use std::fmt::Write as _;

/// The text of `console/js/hidden.js`.
pub fn hidden_js() -> String {
    let mut out = String::from(
        "// Generated from toolshed_core::text::RANGES by crates/toolshed-server/src/console/hidden.rs\n\
         // (UPDATE_CONSOLE=1 cargo test -p toolshed-server --lib console::hidden): do not edit.\n\
         //\n\
         // Characters that act on a display or hide from a reader (escapes, controls, bidi\n\
         // overrides, zero-width and tag characters), shown as \\u{…} wherever the console\n\
         // shows server text, as the CLI does; tabs and newlines are kept.\n\n\
         /** [first, last, kind] code point ranges, sorted. */\n\
         export const RANGES = [\n",
    );
    for (start, end, kind) in toolshed_core::text::RANGES {
        let _ = writeln!(out, "  [0x{start:04X}, 0x{end:04X}, '{}'],", kind.as_str());
    }
    out.push_str(
        "];\n\n\
         const hex = (n) => `\\\\u{${n.toString(16).toUpperCase()}}`;\n\
         const PATTERN = new RegExp(\n\
         \x20 `[${RANGES.map(([a, b]) => (a === b ? hex(a) : `${hex(a)}-${hex(b)}`)).join('')}]`,\n\
         \x20 'gu',\n\
         );\n\n\
         /** `text` as a person may see it: each hidden character written as `\\u{…}`. */\n\
         export function display(text) {\n\
         \x20 return String(text).replace(PATTERN, (c) => `\\\\u{${c.codePointAt(0).toString(16)}}`);\n\
         }\n\n\
         /** The kind of each hidden character of `text`, counted: {kind: count}. */\n\
         export function hidden(text) {\n\
         \x20 const counts = {};\n\
         \x20 for (const c of String(text).match(PATTERN) || []) {\n\
         \x20   const code = c.codePointAt(0);\n\
         \x20   const range = RANGES.find(([a, b]) => code >= a && code <= b);\n\
         \x20   counts[range[2]] = (counts[range[2]] || 0) + 1;\n\
         \x20 }\n\
         \x20 return counts;\n\
         }\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_console_escapes_what_the_core_escapes() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("console/js/hidden.js");
        let want = hidden_js();
        if std::env::var_os("UPDATE_CONSOLE").is_some() {
            std::fs::write(&path, &want).expect("write console/js/hidden.js");
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "console/js/hidden.js is out of date: run `UPDATE_CONSOLE=1 cargo test -p toolshed-server --lib console::hidden`"
        );
    }
}
