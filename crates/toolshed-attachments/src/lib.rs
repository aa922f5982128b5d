//! # toolshed-attachments
//!
//! Parsing an attached file once, at upload, into *pages* that a tool can later read one
//! at a time without parsing the file again: PDF text per page, docx paragraphs, xlsx
//! sheets as rows, CSV rows, and plain text and Markdown.
//!
//! Every file is hostile until parsed. [`parse`] refuses, each with its own stable
//! [`AttachmentCode`]:
//! - a file larger than [`Limits::max_file_bytes`], or of a kind it does not read
//!   (`ATTACHMENT_TOO_LARGE`, `ATTACHMENT_UNSUPPORTED`);
//! - an encrypted PDF, docx or xlsx (`ATTACHMENT_ENCRYPTED`);
//! - a damaged one (`ATTACHMENT_CORRUPT`);
//! - one whose content passes a cap (`ATTACHMENT_LIMIT_EXCEEDED`): pages, characters,
//!   rows and cells, bytes inflated from a zip entry or a PDF stream (zip and flate
//!   bombs, headers that lie about sizes), XML nesting, and parse time.
//!
//! No part of it does IO: it reads bytes handed to it and returns pages.
//!
//! ```
//! use toolshed_attachments::{Limits, PageContent, parse};
//!
//! let parsed = parse("notes.md", b"# Notes\n\nShip by Friday.\n", &Limits::default())?;
//! assert_eq!(parsed.kind.as_str(), "markdown");
//! assert_eq!(parsed.pages.len(), 1);
//! assert!(matches!(&parsed.pages[0].content, PageContent::Text(t) if t.contains("Friday")));
//! # Ok::<(), toolshed_attachments::AttachmentError>(())
//! ```

use std::time::{Duration, Instant};

use serde::Serialize;

mod ooxml;
mod pdf;
mod text;

toolshed_core::wire_enum! {
    case = "SCREAMING_SNAKE_CASE";
    /// The stable codes of [`AttachmentError`]: why a file was refused at upload.
    #[non_exhaustive]
    pub enum AttachmentCode {
        /// Not a kind of file toolshed reads (PDF, docx, xlsx, CSV, text, Markdown).
        AttachmentUnsupported,
        /// The file is encrypted or password-protected.
        AttachmentEncrypted,
        /// The file is damaged or not what its name or first bytes say.
        AttachmentCorrupt,
        /// The file is larger than the upload limit.
        AttachmentTooLarge,
        /// Parsing passed a cap (pages, characters, rows, inflated bytes, XML nesting,
        /// time).
        AttachmentLimitExceeded,
    }
}

/// Why a file cannot be attached. The message names the file's problem and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AttachmentError {
    /// The stable code.
    pub code: AttachmentCode,
    /// What is wrong, and the fix.
    pub message: String,
}

impl AttachmentError {
    pub(crate) fn new(code: AttachmentCode, message: impl Into<String>) -> Self {
        AttachmentError {
            code,
            message: message.into(),
        }
    }
    pub(crate) fn corrupt(kind: Kind, why: impl std::fmt::Display) -> Self {
        Self::new(
            AttachmentCode::AttachmentCorrupt,
            format!(
                "the file is not a readable {} ({why}); save it again from the program that made it",
                kind.label()
            ),
        )
    }
    pub(crate) fn limit(what: impl Into<String>) -> Self {
        Self::new(AttachmentCode::AttachmentLimitExceeded, what)
    }
}

toolshed_core::wire_enum! {
    case = "snake_case";
    /// What kind of file an attachment is.
    pub enum Kind {
        /// PDF: one page per PDF page, its text.
        Pdf,
        /// Word (OOXML) document: paragraphs, grouped into pages.
        Docx,
        /// Excel (OOXML) workbook: each sheet's rows, grouped into pages.
        Xlsx,
        /// Comma-separated values: rows, grouped into pages.
        Csv,
        /// Plain text (UTF-8), grouped into pages at line ends.
        Text,
        /// Markdown, as plain text.
        Markdown,
    }
}

impl Kind {
    /// What a page holds: characters of text, or rows of cells.
    pub fn unit(self) -> Unit {
        match self {
            Kind::Xlsx | Kind::Csv => Unit::Rows,
            Kind::Pdf | Kind::Docx | Kind::Text | Kind::Markdown => Unit::Chars,
        }
    }

    /// The media type stored with the original file.
    pub fn media_type(self) -> &'static str {
        match self {
            Kind::Pdf => "application/pdf",
            Kind::Docx => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
            Kind::Xlsx => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            Kind::Csv => "text/csv",
            Kind::Text => "text/plain",
            Kind::Markdown => "text/markdown",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Pdf => "PDF",
            Kind::Docx => "docx document",
            Kind::Xlsx => "xlsx workbook",
            Kind::Csv => "CSV file",
            Kind::Text => "text file",
            Kind::Markdown => "Markdown file",
        }
    }
}

toolshed_core::wire_enum! {
    case = "snake_case";
    /// What offsets and lengths count in an attachment.
    pub enum Unit {
        /// Characters (Unicode scalar values) of text.
        Chars,
        /// Rows of a table.
        Rows,
    }
}

/// One page's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PageContent {
    /// Text (PDF, docx, text, Markdown).
    Text(String),
    /// Rows of cells, as text (xlsx, CSV).
    Rows(Vec<Vec<String>>),
}

impl PageContent {
    /// The page's length in its unit: characters of text, or rows.
    pub fn len(&self) -> u64 {
        match self {
            PageContent::Text(t) => t.chars().count() as u64,
            PageContent::Rows(r) => r.len() as u64,
        }
    }

    /// Whether the page holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One page of a parsed attachment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Page {
    /// The text or rows.
    pub content: PageContent,
    /// The sheet the rows come from (xlsx only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sheet: Option<String>,
}

/// A parsed attachment: its kind and its pages, in order (at least one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Parsed {
    /// The kind of file.
    pub kind: Kind,
    /// The pages, never empty.
    pub pages: Vec<Page>,
}

/// The caps parsing holds to. The defaults are for documents people attach (reports,
/// spreadsheets, exports); every cap is a refusal with `ATTACHMENT_LIMIT_EXCEEDED`
/// (or `ATTACHMENT_TOO_LARGE` for the file itself), never a truncation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest file accepted (default 32 MiB).
    pub max_file_bytes: u64,
    /// The most pages an attachment may have, PDF pages included (default 2,000).
    pub max_pages: usize,
    /// The most characters of text in all pages together (default 16 Mi).
    pub max_total_chars: u64,
    /// The most rows in all sheets together (default 1 Mi).
    pub max_rows: u64,
    /// The most cells in all sheets together (default 4 Mi).
    pub max_cells: u64,
    /// The most bytes all entries of a docx or xlsx may inflate to together, counted
    /// while inflating, whatever the zip's headers claim (default 64 MiB).
    pub max_inflated_bytes: u64,
    /// The most entries in a docx or xlsx (default 10,000).
    pub max_zip_entries: usize,
    /// The most bytes one PDF page's content (or any PDF stream) may inflate to
    /// (default 16 MiB).
    pub max_stream_bytes: usize,
    /// The deepest XML nesting read (default 256).
    pub max_xml_depth: usize,
    /// How long parsing may take (default 30 s), checked between pages, rows and
    /// paragraphs.
    pub max_parse_time: Duration,
    /// Characters per page of text that has no pages of its own (docx, text,
    /// Markdown; default 4,000): pages end at a paragraph or line end where one is near.
    pub page_chars: usize,
    /// Rows per page of a table (xlsx, CSV; default 100).
    pub page_rows: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: 32 * 1024 * 1024,
            max_pages: 2_000,
            max_total_chars: 16 * 1024 * 1024,
            max_rows: 1024 * 1024,
            max_cells: 4 * 1024 * 1024,
            max_inflated_bytes: 64 * 1024 * 1024,
            max_zip_entries: 10_000,
            max_stream_bytes: 16 * 1024 * 1024,
            max_xml_depth: 256,
            max_parse_time: Duration::from_secs(30),
            page_chars: 4_000,
            page_rows: 100,
        }
    }
}

/// Parse a file: detect its kind from its first bytes and its name, then read it into
/// pages within `limits`. `filename` is used only for its extension.
pub fn parse(filename: &str, bytes: &[u8], limits: &Limits) -> Result<Parsed, AttachmentError> {
    if bytes.len() as u64 > limits.max_file_bytes {
        return Err(AttachmentError::new(
            AttachmentCode::AttachmentTooLarge,
            format!(
                "the file is {} bytes, more than the {} an attachment may have; split it or attach a smaller export",
                bytes.len(),
                limits.max_file_bytes
            ),
        ));
    }
    let kind = detect(filename, bytes)?;
    let mut budget = Budget::new(limits);
    let pages = match kind {
        Kind::Pdf => pdf::parse(bytes, &mut budget)?,
        Kind::Docx => ooxml::docx(bytes, &mut budget)?,
        Kind::Xlsx => ooxml::xlsx(bytes, &mut budget)?,
        Kind::Csv => text::csv(bytes, &mut budget)?,
        Kind::Text | Kind::Markdown => text::text(kind, bytes, &mut budget)?,
    };
    let pages = if pages.is_empty() {
        vec![Page {
            content: match kind.unit() {
                Unit::Chars => PageContent::Text(String::new()),
                Unit::Rows => PageContent::Rows(Vec::new()),
            },
            sheet: None,
        }]
    } else {
        pages
    };
    Ok(Parsed { kind, pages })
}

/// The kind of a file, from its first bytes (PDF, zip, OLE) and its extension.
pub fn detect(filename: &str, bytes: &[u8]) -> Result<Kind, AttachmentError> {
    let ext = filename
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    let head = &bytes[..bytes.len().min(1024)];
    if head.windows(5).any(|w| w == b"%PDF-") {
        return Ok(Kind::Pdf);
    }
    if bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(b"PK\x05\x06") {
        return ooxml::detect(bytes);
    }
    if bytes.starts_with(&[0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1]) {
        // An OLE compound file: either a password-protected OOXML file (its package is
        // encrypted inside an `EncryptedPackage` stream) or a legacy .doc/.xls.
        let encrypted = utf16_contains(bytes, "EncryptedPackage");
        return Err(if encrypted {
            AttachmentError::new(
                AttachmentCode::AttachmentEncrypted,
                "the file is a password-protected Office document; remove the password (save it again without one) and attach it again",
            )
        } else {
            AttachmentError::new(
                AttachmentCode::AttachmentUnsupported,
                "legacy Office files (.doc, .xls) are not read; save the file as .docx or .xlsx and attach it again",
            )
        });
    }
    if matches!(ext.as_str(), "pdf" | "docx" | "xlsx") {
        let kind = match ext.as_str() {
            "pdf" => Kind::Pdf,
            "docx" => Kind::Docx,
            _ => Kind::Xlsx,
        };
        return Err(AttachmentError::corrupt(
            kind,
            format!(
                "its name ends in .{ext} but its first bytes are not a {}",
                kind.label()
            ),
        ));
    }
    let textual = std::str::from_utf8(bytes).is_ok() && !bytes.contains(&0);
    match (ext.as_str(), textual) {
        ("csv", true) => Ok(Kind::Csv),
        ("md" | "markdown", true) => Ok(Kind::Markdown),
        ("txt" | "text" | "log" | "", true) => Ok(Kind::Text),
        (_, true) => Ok(Kind::Text),
        ("csv" | "md" | "markdown" | "txt" | "text", false) => Err(AttachmentError::new(
            AttachmentCode::AttachmentCorrupt,
            format!(
                "the file's name ends in .{ext} but it is not UTF-8 text; save it as UTF-8 and attach it again"
            ),
        )),
        _ => Err(AttachmentError::new(
            AttachmentCode::AttachmentUnsupported,
            "the file is not a kind toolshed reads: attach a PDF, docx, xlsx, CSV, plain text or Markdown file",
        )),
    }
}

/// Whether `needle` appears UTF-16LE encoded in `bytes` (OLE stream names).
fn utf16_contains(bytes: &[u8], needle: &str) -> bool {
    let pattern: Vec<u8> = needle.encode_utf16().flat_map(u16::to_le_bytes).collect();
    bytes
        .windows(pattern.len())
        .any(|w| w == pattern.as_slice())
}

/// What parsing has used of its limits so far.
pub(crate) struct Budget<'l> {
    pub(crate) limits: &'l Limits,
    started: Instant,
    chars: u64,
    rows: u64,
    cells: u64,
    pages: usize,
}

impl<'l> Budget<'l> {
    fn new(limits: &'l Limits) -> Self {
        Budget {
            limits,
            started: Instant::now(),
            chars: 0,
            rows: 0,
            cells: 0,
            pages: 0,
        }
    }

    /// Fail once parsing has taken longer than allowed.
    pub(crate) fn check_time(&self) -> Result<(), AttachmentError> {
        if self.started.elapsed() > self.limits.max_parse_time {
            return Err(AttachmentError::limit(format!(
                "parsing took longer than the {} ms allowed; attach a smaller or simpler file",
                self.limits.max_parse_time.as_millis()
            )));
        }
        Ok(())
    }

    /// Count a page about to be added.
    pub(crate) fn page(&mut self) -> Result<(), AttachmentError> {
        self.pages += 1;
        self.pages_at_most(self.pages)?;
        self.check_time()
    }

    /// Fail if a document has more pages than allowed.
    pub(crate) fn pages_at_most(&self, pages: usize) -> Result<(), AttachmentError> {
        if pages > self.limits.max_pages {
            return Err(AttachmentError::limit(format!(
                "the file has more than {} pages, the most an attachment may have; split it",
                self.limits.max_pages
            )));
        }
        Ok(())
    }

    /// Count characters of text.
    pub(crate) fn chars(&mut self, n: u64) -> Result<(), AttachmentError> {
        self.chars += n;
        if self.chars > self.limits.max_total_chars {
            return Err(AttachmentError::limit(format!(
                "the file holds more than {} characters of text, the most an attachment may have; split it",
                self.limits.max_total_chars
            )));
        }
        Ok(())
    }

    /// Count one row of `cells` cells.
    pub(crate) fn row(&mut self, cells: usize) -> Result<(), AttachmentError> {
        self.rows += 1;
        self.cells += cells as u64;
        if self.rows > self.limits.max_rows || self.cells > self.limits.max_cells {
            return Err(AttachmentError::limit(format!(
                "the file has more than {} rows or {} cells, the most an attachment may have; split it",
                self.limits.max_rows, self.limits.max_cells
            )));
        }
        if self.rows.is_multiple_of(1024) {
            self.check_time()?;
        }
        Ok(())
    }
}

/// Split `text` into pages of about `page_chars` characters, each ending at a line end
/// when one is in the second half of the page.
pub(crate) fn split_text(text: &str, page_chars: usize) -> Vec<String> {
    let page_chars = page_chars.max(1);
    let mut pages = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        // The byte index after `page_chars` characters, or the end.
        let cut = rest
            .char_indices()
            .nth(page_chars)
            .map_or(rest.len(), |(i, _)| i);
        let end = if cut == rest.len() {
            cut
        } else {
            let half = rest[..cut]
                .char_indices()
                .nth(page_chars / 2)
                .map_or(0, |(i, _)| i);
            match rest[half..cut].rfind('\n') {
                Some(nl) => half + nl + 1,
                None => cut,
            }
        };
        pages.push(rest[..end].to_owned());
        rest = &rest[end..];
    }
    pages
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn text_is_split_at_line_ends_near_the_page_size() {
        let text = "aaaa\nbbbb\ncccc\n";
        assert_eq!(split_text(text, 12), vec!["aaaa\nbbbb\n", "cccc\n"]);
        assert_eq!(split_text("abcdef", 4), vec!["abcd", "ef"]);
        assert_eq!(split_text("ääää", 2), vec!["ää", "ää"]);
        assert!(split_text("", 4).is_empty());
    }

    #[test]
    fn kinds_are_detected_from_bytes_then_names() {
        assert_eq!(detect("x.bin", b"%PDF-1.7 ...").unwrap(), Kind::Pdf);
        assert_eq!(detect("a.csv", b"a,b\n").unwrap(), Kind::Csv);
        assert_eq!(detect("a.md", b"# x").unwrap(), Kind::Markdown);
        assert_eq!(detect("a", b"hello").unwrap(), Kind::Text);
        let e = detect("a.png", b"\x89PNG\r\n\x1a\n\0\0").unwrap_err();
        assert_eq!(e.code, AttachmentCode::AttachmentUnsupported);
        let e = detect("a.pdf", b"hello").unwrap_err();
        assert_eq!(e.code, AttachmentCode::AttachmentCorrupt);
        let e = detect(
            "a.doc",
            &[0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1, 0],
        )
        .unwrap_err();
        assert_eq!(e.code, AttachmentCode::AttachmentUnsupported);
        let mut ole = vec![0xD0, 0xCF, 0x11, 0xE0, 0xA1, 0xB1, 0x1A, 0xE1];
        ole.extend("EncryptedPackage".encode_utf16().flat_map(u16::to_le_bytes));
        let e = detect("a.docx", &ole).unwrap_err();
        assert_eq!(e.code, AttachmentCode::AttachmentEncrypted);
    }
}
