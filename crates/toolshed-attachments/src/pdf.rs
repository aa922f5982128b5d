//! PDF: one page per PDF page, its text (lopdf's extraction, fonts' encodings and
//! ToUnicode maps applied).
//!
//! lopdf bounds what it does itself (nesting depth of objects, filters per stream); on
//! top of that every stream it inflates, while loading and per page, is capped at
//! [`Limits::max_stream_bytes`](crate::Limits::max_stream_bytes), the page count is
//! checked before any page is read, and time is checked after each page.

use std::collections::BTreeMap;

use lopdf::content::Content;
use lopdf::{DecompressError, Document, Encoding, Error, LoadOptions, Object, ObjectId};

use crate::{AttachmentCode, AttachmentError, Budget, Kind, Page, PageContent};

const ENCRYPTED: &str = "the PDF is encrypted; remove the encryption (e.g. `qpdf --decrypt --password=PASSWORD in.pdf out.pdf`) and attach it again";

pub(crate) fn parse(bytes: &[u8], budget: &mut Budget<'_>) -> Result<Vec<Page>, AttachmentError> {
    let max_stream = budget.limits.max_stream_bytes;
    let options = LoadOptions {
        max_decompressed_size: Some(max_stream),
        ..LoadOptions::default()
    };
    let doc = Document::load_mem_with_options(bytes, options).map_err(|e| map(e, max_stream))?;
    if doc.is_encrypted() || doc.was_encrypted() {
        return Err(AttachmentError::new(
            AttachmentCode::AttachmentEncrypted,
            ENCRYPTED,
        ));
    }
    budget.check_time()?;
    let ids: Vec<ObjectId> = doc.get_pages().into_values().collect();
    if ids.is_empty() {
        return Err(AttachmentError::corrupt(Kind::Pdf, "it has no pages"));
    }
    budget.pages_at_most(ids.len())?;
    let mut pages = Vec::with_capacity(ids.len());
    for id in ids {
        let text = page_text(&doc, id, max_stream).map_err(|e| map(e, max_stream))?;
        let text = text.replace("\r\n", "\n");
        budget.chars(text.chars().count() as u64)?;
        budget.page()?;
        pages.push(Page {
            content: PageContent::Text(text),
            sheet: None,
        });
    }
    Ok(pages)
}

fn map(e: Error, max_stream: usize) -> AttachmentError {
    match e {
        Error::Decompress(DecompressError::MemoryLimitExceeded { .. }) => {
            AttachmentError::limit(format!(
                "a stream of the PDF inflates to more than the {max_stream} bytes allowed (a decompression bomb, or a page far larger than documents have); attach a smaller file"
            ))
        }
        Error::Decompress(DecompressError::TooManyFilters { count, limit }) => {
            AttachmentError::limit(format!(
                "a stream of the PDF has {count} filters, more than the {limit} read; attach a simpler file"
            ))
        }
        Error::Decryption(_)
        | Error::InvalidPassword
        | Error::UnsupportedSecurityHandler(_)
        | Error::AlreadyEncrypted => {
            AttachmentError::new(AttachmentCode::AttachmentEncrypted, ENCRYPTED)
        }
        Error::RecursionLimit | Error::ReferenceLimit => AttachmentError::limit(
            "the PDF's objects nest or refer to each other deeper than allowed; attach a simpler file",
        ),
        other => AttachmentError::corrupt(Kind::Pdf, other),
    }
}

/// One page's text, as lopdf's own extraction has it (`Tj`, `TJ`, `'` and `"` shown in
/// the current font's encoding, a line end at `T*` and `ET`, a space for a wide `TJ`
/// gap), for one page by its object id: lopdf's `extract_text` looks the page tree up
/// again for every page asked for, which makes a long document quadratic.
fn page_text(doc: &Document, page: ObjectId, max_stream: usize) -> Result<String, Error> {
    let mut encodings: BTreeMap<Vec<u8>, Encoding<'_>> = BTreeMap::new();
    for (name, font) in doc.get_page_fonts(page)? {
        match font.get_font_encoding_with_limit(doc, max_stream) {
            Ok(encoding) => {
                encodings.insert(name, encoding);
            }
            Err(e @ Error::Decompress(_)) => return Err(e),
            // A font without a usable encoding loses its text, not the page's.
            Err(_) => {}
        }
    }
    let content = Content::decode(&doc.get_page_content_with_limit(page, max_stream)?)?;
    let mut text = String::new();
    let mut current: Option<&Encoding<'_>> = None;
    let newline = |text: &mut String| {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
    };
    for op in &content.operations {
        match op.operator.as_str() {
            "Tf" => {
                current = op
                    .operands
                    .first()
                    .and_then(|o| o.as_name().ok())
                    .and_then(|name| encodings.get(name));
            }
            "Tj" | "TJ" => {
                if let Some(encoding) = current {
                    collect(&mut text, encoding, &op.operands);
                }
            }
            "'" => {
                newline(&mut text);
                if let Some(encoding) = current {
                    collect(&mut text, encoding, &op.operands);
                }
            }
            "\"" => {
                newline(&mut text);
                if let (Some(encoding), Some(shown)) = (current, op.operands.get(2)) {
                    collect(&mut text, encoding, std::slice::from_ref(shown));
                }
            }
            "T*" | "ET" => newline(&mut text),
            _ => {}
        }
    }
    Ok(text)
}

/// Shown strings in `encoding`; a string that does not decode is skipped.
fn collect(text: &mut String, encoding: &Encoding<'_>, operands: &[Object]) {
    for operand in operands {
        match operand {
            Object::String(bytes, _) => {
                let mut decoded = String::new();
                if encoding.write_to_string(bytes, &mut decoded).is_ok() {
                    text.push_str(&decoded);
                }
            }
            Object::Array(items) => {
                collect(text, encoding, items);
                text.push(' ');
            }
            Object::Integer(gap) if *gap < -100 => text.push(' '),
            _ => {}
        }
    }
}
