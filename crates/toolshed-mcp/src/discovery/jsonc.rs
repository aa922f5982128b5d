//! JSONC (JSON with comments and trailing commas, VS Code's config dialect) to JSON.
//!
//! Why not a crate: the whole dialect is `//` and `/* */` comments plus trailing commas,
//! and the one property we need is that every byte keeps its offset, so serde_json's
//! line and column in an error point at the user's file. Comments and trailing commas
//! are replaced by spaces (newlines inside block comments are kept).

/// The JSON text of `jsonc`: the same length, the same line breaks, comments and
/// trailing commas blanked. Strings are copied as they are (a `//` in a URL stays).
pub fn strip(jsonc: &str) -> String {
    let bytes = jsonc.as_bytes();
    let mut out: Vec<u8> = bytes.to_vec();
    let mut i = 0;
    // The position of the last comma outside strings and comments, while only
    // whitespace and comments follow it.
    let mut pending_comma: Option<usize> = None;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                pending_comma = None;
                i += 1;
                while i < bytes.len() {
                    match bytes[i] {
                        b'\\' => i += 2,
                        b'"' => {
                            i += 1;
                            break;
                        }
                        _ => i += 1,
                    }
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    blank(&mut out, i);
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                blank(&mut out, i);
                blank(&mut out, i + 1);
                i += 2;
                while i < bytes.len() {
                    if bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/') {
                        blank(&mut out, i);
                        blank(&mut out, i + 1);
                        i += 2;
                        break;
                    }
                    blank(&mut out, i);
                    i += 1;
                }
            }
            b',' => {
                pending_comma = Some(i);
                i += 1;
            }
            b'}' | b']' => {
                if let Some(at) = pending_comma.take() {
                    out[at] = b' ';
                }
                i += 1;
            }
            b' ' | b'\t' | b'\r' | b'\n' => i += 1,
            _ => {
                pending_comma = None;
                i += 1;
            }
        }
    }
    // Only ASCII bytes were replaced, by ASCII spaces, never inside a multi-byte
    // character (those bytes are all >= 0x80), so the text is still UTF-8.
    String::from_utf8(out).unwrap_or_else(|_| jsonc.to_owned())
}

/// Blank one byte of a comment, keeping line breaks (so line numbers stay) and the
/// bytes of multi-byte characters as they are would break UTF-8: those become spaces
/// too, byte by byte, which keeps offsets.
fn blank(out: &mut [u8], i: usize) {
    if let Some(b) = out.get_mut(i)
        && *b != b'\n'
        && *b != b'\r'
    {
        *b = b' ';
    }
}

#[cfg(test)]
mod tests {
    use super::strip;

    fn check(jsonc: &str, json: &str) {
        let got = strip(jsonc);
        assert_eq!(got.len(), jsonc.len(), "offsets kept");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&got).unwrap(),
            serde_json::from_str::<serde_json::Value>(json).unwrap(),
            "{got}"
        );
    }

    #[test]
    fn comments_and_trailing_commas_go() {
        check(
            "{\n  // a comment\n  \"a\": [1, 2,], /* block\n spanning */ \"b\": {\"c\": 1,},\n}",
            r#"{"a": [1, 2], "b": {"c": 1}}"#,
        );
    }

    #[test]
    fn strings_are_kept() {
        check(
            r#"{"url": "https://x/y//z", "s": "a /* b */ c", "q": "say \"//hi\",]"}"#,
            r#"{"url": "https://x/y//z", "s": "a /* b */ c", "q": "say \"//hi\",]"}"#,
        );
    }

    #[test]
    fn a_comment_with_non_ascii_text_keeps_utf8_and_lines() {
        let got = strip("{\n// héllo ☃\n\"a\": 1}");
        assert_eq!(got.lines().count(), 3);
        check("{\n// héllo ☃\n\"a\": 1}", r#"{"a": 1}"#);
    }

    #[test]
    fn a_comma_before_a_comment_before_a_brace_is_trailing() {
        check("[1, // one\n]", "[1]");
    }

    #[test]
    fn an_unterminated_comment_or_string_does_not_panic() {
        let _ = strip("{\"a\": /* never closed");
        let _ = strip("{\"a\": \"never closed\\");
    }
}
