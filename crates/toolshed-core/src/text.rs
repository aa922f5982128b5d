//! Text from elsewhere (an MCP server's tool descriptions and schemas, a tool's stdout
//! and stderr, a remote error message) made safe to show a person, and what it hides.
//!
//! Some characters change what a terminal does or what a reader sees without being
//! seen themselves: terminal escapes (`ESC[8m` conceals the text after it, `ESC]0;…`
//! sets the window title, `ESC]52;…` writes the clipboard, cursor moves overwrite lines),
//! other control characters (a carriage return rewrites a line), bidirectional overrides
//! (the reader sees the text in another order than the model reads it), zero-width and
//! other invisible characters, and Unicode tag characters (`U+E0000`–`U+E007F`, which
//! spell ASCII no one sees). [`RANGES`] lists them, [`classify`] says which kind a
//! character is, [`for_display`] shows each as `\u{…}` (tabs and newlines kept), and
//! [`hidden`] counts them so a tool can be flagged.
//!
//! Every human surface uses [`for_display`] (the CLI's tables and `show`, and the web
//! console, whose `js/hidden.js` is generated from [`RANGES`]); `--json` and the API
//! keep text as it is.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A kind of character that acts or hides instead of showing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hidden {
    /// `ESC` and the 8-bit C1 controls (`U+0080`–`U+009F`, CSI and OSC among them): they
    /// start terminal escape sequences.
    Escape,
    /// Other control characters: C0 but tab and newline, `DEL`, the line and paragraph
    /// separators and the interlinear annotation characters.
    Control,
    /// Bidirectional marks, embeddings, overrides and isolates.
    Bidi,
    /// Zero-width and other invisible characters (joiners, the byte order mark,
    /// variation selectors but the emoji ones, fillers).
    ZeroWidth,
    /// Unicode tag characters, `U+E0000`–`U+E007F`.
    Tag,
}

impl Hidden {
    /// Its wire name: `escape`, `control`, `bidi`, `zero_width`, `tag`.
    pub fn as_str(self) -> &'static str {
        match self {
            Hidden::Escape => "escape",
            Hidden::Control => "control",
            Hidden::Bidi => "bidi",
            Hidden::ZeroWidth => "zero_width",
            Hidden::Tag => "tag",
        }
    }

    /// How a person is told of it: `terminal escape`, `control`, `bidirectional`,
    /// `zero-width`, `tag`.
    pub fn label(self) -> &'static str {
        match self {
            Hidden::Escape => "terminal escape",
            Hidden::Control => "control",
            Hidden::Bidi => "bidirectional",
            Hidden::ZeroWidth => "zero-width",
            Hidden::Tag => "tag",
        }
    }
}

impl std::fmt::Display for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every character range [`for_display`] escapes, with its kind: sorted, not
/// overlapping, both ends included. Tab (`U+0009`) and newline (`U+000A`) are not in
/// it; the emoji variation selectors `U+FE0E`/`U+FE0F` are not either (they only pick a
/// glyph's style and are in every other emoji).
pub const RANGES: &[(u32, u32, Hidden)] = &[
    (0x0000, 0x0008, Hidden::Control),
    (0x000B, 0x001A, Hidden::Control),
    (0x001B, 0x001B, Hidden::Escape),
    (0x001C, 0x001F, Hidden::Control),
    (0x007F, 0x007F, Hidden::Control),
    (0x0080, 0x009F, Hidden::Escape),
    (0x00AD, 0x00AD, Hidden::ZeroWidth),
    (0x034F, 0x034F, Hidden::ZeroWidth),
    (0x061C, 0x061C, Hidden::Bidi),
    (0x115F, 0x1160, Hidden::ZeroWidth),
    (0x17B4, 0x17B5, Hidden::ZeroWidth),
    (0x180B, 0x180F, Hidden::ZeroWidth),
    (0x200B, 0x200D, Hidden::ZeroWidth),
    (0x200E, 0x200F, Hidden::Bidi),
    (0x2028, 0x2029, Hidden::Control),
    (0x202A, 0x202E, Hidden::Bidi),
    (0x2060, 0x2064, Hidden::ZeroWidth),
    (0x2066, 0x2069, Hidden::Bidi),
    (0x206A, 0x206F, Hidden::ZeroWidth),
    (0x3164, 0x3164, Hidden::ZeroWidth),
    (0xFE00, 0xFE0D, Hidden::ZeroWidth),
    (0xFEFF, 0xFEFF, Hidden::ZeroWidth),
    (0xFFA0, 0xFFA0, Hidden::ZeroWidth),
    (0xFFF9, 0xFFFB, Hidden::Control),
    (0x1D173, 0x1D17A, Hidden::ZeroWidth),
    (0xE0000, 0xE007F, Hidden::Tag),
    (0xE0100, 0xE01EF, Hidden::ZeroWidth),
];

/// The kind of `c`, when it is one [`for_display`] escapes.
pub fn classify(c: char) -> Option<Hidden> {
    let code = u32::from(c);
    let i = RANGES.partition_point(|(_, end, _)| *end < code);
    RANGES
        .get(i)
        .filter(|(start, _, _)| *start <= code)
        .map(|(_, _, kind)| *kind)
}

/// `text` as a person may see it: every character of [`RANGES`] written as `\u{…}`
/// (lower-case hex, as Rust writes it), so `ESC[8m` shows as `\u{1b}[8m` and does
/// nothing; tabs and newlines kept. Borrowed when there is nothing to escape.
pub fn for_display(text: &str) -> Cow<'_, str> {
    let Some(first) = text.char_indices().find(|(_, c)| classify(*c).is_some()) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 16);
    out.push_str(&text[..first.0]);
    for c in text[first.0..].chars() {
        if classify(c).is_some() {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// How many characters of each kind `text` holds, by kind (kinds it has none of left
/// out).
pub fn hidden(text: &str) -> Vec<(Hidden, usize)> {
    let mut counts: Vec<(Hidden, usize)> = Vec::new();
    for kind in text.chars().filter_map(classify) {
        match counts.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, n)) => *n += 1,
            None => counts.push((kind, 1)),
        }
    }
    counts.sort();
    counts
}

/// Characters of one kind found in one field of a definition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HiddenText {
    /// Where: `description`, `title`, or a JSON pointer into a schema
    /// (`input_schema/properties/q/description`).
    pub field: String,
    /// The kind.
    pub kind: Hidden,
    /// How many.
    pub count: usize,
}

impl HiddenText {
    /// One line for a person: `description: 14 tag characters`.
    pub fn describe(&self) -> String {
        format!(
            "{}: {} {} character{}",
            self.field,
            self.count,
            self.kind.label(),
            if self.count == 1 { "" } else { "s" }
        )
    }
}

/// Add what `text` (the value of `field`) hides to `out`.
pub fn hidden_in_text(field: &str, text: &str, out: &mut Vec<HiddenText>) {
    for (kind, count) in hidden(text) {
        out.push(HiddenText {
            field: field.to_owned(),
            kind,
            count,
        });
    }
}

/// Add what every string of `value` (keys and values, at any depth) hides to `out`,
/// each under its JSON pointer below `field`.
pub fn hidden_in_json(field: &str, value: &Value, out: &mut Vec<HiddenText>) {
    match value {
        Value::String(s) => hidden_in_text(field, s, out),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                hidden_in_json(&format!("{field}/{i}"), item, out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                let key = escape_pointer(k);
                let path = format!("{field}/{key}");
                hidden_in_text(&path, k, out);
                hidden_in_json(&path, v, out);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// A JSON pointer segment (`~` as `~0`, `/` as `~1`), shown safely.
fn escape_pointer(key: &str) -> String {
    for_display(&key.replace('~', "~0").replace('/', "~1")).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_disjoint() {
        for pair in RANGES.windows(2) {
            let [(a0, a1, _), (b0, _, _)] = pair else {
                continue;
            };
            assert!(a0 <= a1 && a1 < b0, "{pair:?}");
        }
    }

    /// Every character of every class, at both ends of each range and in between.
    #[test]
    fn every_character_of_every_range_is_classified_and_escaped() {
        for (start, end, kind) in RANGES {
            for code in [*start, (start + end) / 2, *end] {
                let Some(c) = char::from_u32(code) else {
                    continue;
                };
                assert_eq!(classify(c), Some(*kind), "U+{code:04X}");
                let input = format!("a{c}b");
                let shown = for_display(&input);
                assert_eq!(shown, format!("a\\u{{{code:x}}}b"), "U+{code:04X}");
                assert!(shown.chars().all(|c| classify(c).is_none()));
            }
            // Just outside each range: not this range's kind (the next range, if it is
            // adjacent, may take it).
            for code in [start.wrapping_sub(1), end + 1] {
                if let Some(c) = char::from_u32(code)
                    && !RANGES.iter().any(|(s, e, _)| (*s..=*e).contains(&code))
                {
                    assert_eq!(classify(c), None, "U+{code:04X}");
                }
            }
        }
    }

    #[test]
    fn every_character_outside_the_table_is_kept() {
        // The whole of Unicode: only the table's characters change.
        for code in 0..=0x10FFFF_u32 {
            let Some(c) = char::from_u32(code) else {
                continue;
            };
            let listed = RANGES.iter().any(|(s, e, _)| (*s..=*e).contains(&code));
            assert_eq!(classify(c).is_some(), listed, "U+{code:04X}");
        }
    }

    #[test]
    fn terminal_attacks_show_as_text() {
        let check = |input: &str, expect: &str| assert_eq!(for_display(input), expect);
        // Concealed text, a window title (OSC 0, BEL- and ST-terminated), a clipboard
        // write (OSC 52), cursor moves and a line erase, a carriage return, 8-bit CSI.
        check("ok\x1b[8mhidden\x1b[0m", "ok\\u{1b}[8mhidden\\u{1b}[0m");
        check("\x1b]0;pwned\x07", "\\u{1b}]0;pwned\\u{7}");
        check("\x1b]52;c;ZWNobw==\x1b\\", "\\u{1b}]52;c;ZWNobw==\\u{1b}\\");
        check("\x1b[2A\x1b[2K", "\\u{1b}[2A\\u{1b}[2K");
        check("safe\rEVIL", "safe\\u{d}EVIL");
        check("\u{9b}31m", "\\u{9b}31m");
        // Bidi override, zero-width, tags (invisible "IGNORE"), a BOM.
        check("a\u{202e}cba\u{202c}", "a\\u{202e}cba\\u{202c}");
        check("x\u{200b}y", "x\\u{200b}y");
        check("\u{e0049}\u{e0047}", "\\u{e0049}\\u{e0047}");
        check("\u{feff}t", "\\u{feff}t");
        // Kept: tabs, newlines, accents, CJK, emoji with their presentation selector.
        for kept in ["a\tb\nc", "café", "工具", "❤\u{fe0f}", "plain"] {
            assert!(matches!(for_display(kept), Cow::Borrowed(_)), "{kept:?}");
        }
    }

    #[test]
    fn hidden_characters_are_counted_per_field() {
        let desc = "Reads a file.\u{200b}\u{200b}\u{e0049}\u{e0047}\u{e004e}\x1b[8m";
        assert_eq!(
            hidden(desc),
            [
                (Hidden::Escape, 1),
                (Hidden::ZeroWidth, 2),
                (Hidden::Tag, 3)
            ]
        );
        let mut out = Vec::new();
        hidden_in_json(
            "input_schema",
            &serde_json::json!({"properties": {"p/a\u{202e}": {"description": "x\u{2066}"}}}),
            &mut out,
        );
        let lines: Vec<String> = out.iter().map(HiddenText::describe).collect();
        assert_eq!(
            lines,
            [
                "input_schema/properties/p~1a\\u{202e}: 1 bidirectional character",
                "input_schema/properties/p~1a\\u{202e}/description: 1 bidirectional character",
            ]
        );
    }
}
