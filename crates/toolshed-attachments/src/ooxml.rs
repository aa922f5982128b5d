//! docx and xlsx: zip packages of XML, read only after a check that bounds them.
//!
//! Before anything parses a package, [`check_package`] counts its entries and inflates
//! every one of them, counting the bytes as they come out, so a zip bomb (or an entry
//! whose headers lie about its size) fails at [`Limits::max_inflated_bytes`] whatever
//! the headers say. docx paragraphs are read with a streaming XML reader whose nesting
//! is capped; xlsx cells are read one by one (never as a dense grid, which a sheet with
//! two far-apart cells would make enormous) and counted against the cell cap.
//!
//! [`Limits::max_inflated_bytes`]: crate::Limits::max_inflated_bytes

use std::collections::BTreeMap;
use std::io::{Cursor, Read};

use calamine::{Data, Reader as _, Xlsx};
use quick_xml::events::Event;

use crate::{AttachmentCode, AttachmentError, Budget, Kind, Page, PageContent, split_text};

const DOCUMENT: &str = "word/document.xml";
const WORKBOOK: &str = "xl/workbook.xml";

/// A zip file: a docx, an xlsx, or something else (refused).
pub(crate) fn detect(bytes: &[u8]) -> Result<Kind, AttachmentError> {
    let archive = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| AttachmentError::corrupt(Kind::Docx, format!("a damaged zip package: {e}")))?;
    let has = |name: &str| archive.file_names_raw().any(|n| n == name.as_bytes());
    if has(DOCUMENT) {
        Ok(Kind::Docx)
    } else if has(WORKBOOK) {
        Ok(Kind::Xlsx)
    } else {
        Err(AttachmentError::new(
            AttachmentCode::AttachmentUnsupported,
            "the file is a zip archive but not a docx or xlsx document; attach the documents inside it one by one",
        ))
    }
}

/// Inflate every entry, counting; return the bytes of `keep`.
fn check_package(
    kind: Kind,
    bytes: &[u8],
    keep: &str,
    budget: &Budget<'_>,
) -> Result<Vec<u8>, AttachmentError> {
    let limits = budget.limits;
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| AttachmentError::corrupt(kind, format!("a damaged zip package: {e}")))?;
    if archive.len() > limits.max_zip_entries {
        return Err(AttachmentError::limit(format!(
            "the package holds {} files, more than the {} allowed; attach a simpler document",
            archive.len(),
            limits.max_zip_entries
        )));
    }
    let mut inflated: u64 = 0;
    let mut kept = None;
    for i in 0..archive.len() {
        let encrypted = archive
            .by_index_raw(i)
            .map(|f| f.encrypted())
            .map_err(|e| AttachmentError::corrupt(kind, e))?;
        if encrypted {
            return Err(AttachmentError::new(
                AttachmentCode::AttachmentEncrypted,
                "the document's package is password-protected; remove the password and attach it again",
            ));
        }
        let entry = archive
            .by_index(i)
            .map_err(|e| AttachmentError::corrupt(kind, e))?;
        let is_kept = entry.name().is_ok_and(|n| n == keep);
        let room = limits.max_inflated_bytes.saturating_sub(inflated);
        // One byte more than the room, to tell "exactly full" from "over".
        let mut limited = entry.take(room.saturating_add(1));
        let n = if is_kept {
            let mut buf = Vec::new();
            let n = limited
                .read_to_end(&mut buf)
                .map_err(|e| AttachmentError::corrupt(kind, e))?;
            kept = Some(buf);
            n as u64
        } else {
            std::io::copy(&mut limited, &mut std::io::sink())
                .map_err(|e| AttachmentError::corrupt(kind, e))?
        };
        inflated += n;
        if inflated > limits.max_inflated_bytes {
            return Err(AttachmentError::limit(format!(
                "the document's package inflates to more than the {} bytes allowed (a zip bomb, or a document far larger than documents are); attach a smaller file",
                limits.max_inflated_bytes
            )));
        }
        budget.check_time()?;
    }
    kept.ok_or_else(|| AttachmentError::corrupt(kind, format!("it has no {keep}")))
}

/// docx: the paragraphs of the body, in order; a page ends at an explicit page break
/// (`w:br w:type="page"`, `w:pageBreakBefore`), and a long stretch without one is split
/// into pages of about `page_chars` characters at paragraph ends.
pub(crate) fn docx(bytes: &[u8], budget: &mut Budget<'_>) -> Result<Vec<Page>, AttachmentError> {
    let xml = check_package(Kind::Docx, bytes, DOCUMENT, budget)?;
    let mut reader = quick_xml::Reader::from_reader(xml.as_slice());
    let mut buf = Vec::new();
    let mut depth = 0usize;
    let mut in_text = false;
    let mut sections: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut paragraphs = 0u64;
    loop {
        let event = reader
            .read_event_into(&mut buf)
            .map_err(|e| AttachmentError::corrupt(Kind::Docx, format!("{DOCUMENT}: {e}")))?;
        match event {
            Event::Start(e) => {
                depth += 1;
                if depth > budget.limits.max_xml_depth {
                    return Err(AttachmentError::limit(format!(
                        "the document's XML nests deeper than the {} levels read; attach a simpler document",
                        budget.limits.max_xml_depth
                    )));
                }
                if e.local_name().as_ref() == "t" {
                    in_text = true;
                }
            }
            Event::End(e) => {
                depth = depth.saturating_sub(1);
                match e.local_name().as_ref() {
                    "t" => in_text = false,
                    "p" => {
                        current.push('\n');
                        paragraphs += 1;
                        if paragraphs.is_multiple_of(256) {
                            budget.check_time()?;
                        }
                    }
                    _ => {}
                }
            }
            Event::Empty(e) => match e.local_name().as_ref() {
                "tab" => current.push('\t'),
                "cr" => current.push('\n'),
                "br" => {
                    let page = e
                        .try_get_attribute("w:type")
                        .ok()
                        .flatten()
                        .is_some_and(|a| a.value == "page");
                    if page {
                        sections.push(std::mem::take(&mut current));
                    } else {
                        current.push('\n');
                    }
                }
                "pageBreakBefore" => {
                    let off = e
                        .try_get_attribute("w:val")
                        .ok()
                        .flatten()
                        .is_some_and(|a| matches!(a.value.as_ref(), "0" | "false"));
                    if !off {
                        sections.push(std::mem::take(&mut current));
                    }
                }
                _ => {}
            },
            Event::Text(t) if in_text => current.push_str(&t.xml10_content()),
            Event::GeneralRef(r) if in_text => {
                if let Some(c) = r
                    .resolve_char_ref()
                    .map_err(|e| AttachmentError::corrupt(Kind::Docx, e))?
                {
                    current.push(c);
                } else {
                    // Only XML's own five entities exist in a docx; anything else is
                    // never expanded.
                    current.push_str(match &*r {
                        "amp" => "&",
                        "lt" => "<",
                        "gt" => ">",
                        "quot" => "\"",
                        "apos" => "'",
                        _ => "",
                    });
                }
            }
            Event::Eof => break,
            _ => {}
        }
        if current.len() as u64 > budget.limits.max_total_chars.saturating_mul(4) {
            budget.chars(current.chars().count() as u64)?;
        }
        buf.clear();
    }
    sections.push(current);
    let mut pages = Vec::new();
    for section in sections {
        let section = section.trim_matches('\n');
        if section.is_empty() {
            continue;
        }
        budget.chars(section.chars().count() as u64)?;
        for chunk in split_text(section, budget.limits.page_chars) {
            budget.page()?;
            pages.push(Page {
                content: PageContent::Text(chunk),
                sheet: None,
            });
        }
    }
    Ok(pages)
}

/// xlsx: every sheet's non-empty rows, `page_rows` to a page, each page naming its
/// sheet. Cells are read one at a time; a row's gaps are filled with empty cells and
/// counted against the cell cap, so a sparse sheet cannot make a huge grid.
pub(crate) fn xlsx(bytes: &[u8], budget: &mut Budget<'_>) -> Result<Vec<Page>, AttachmentError> {
    check_package(Kind::Xlsx, bytes, WORKBOOK, budget)?;
    let corrupt = |e: calamine::XlsxError| AttachmentError::corrupt(Kind::Xlsx, e);
    let mut workbook: Xlsx<_> = Xlsx::new(Cursor::new(bytes)).map_err(corrupt)?;
    let names = workbook.sheet_names();
    let mut pages = Vec::new();
    for name in names {
        let mut cells: BTreeMap<u32, BTreeMap<u32, String>> = BTreeMap::new();
        let mut first_col = u32::MAX;
        {
            let mut reader = workbook.worksheet_cells_reader(&name).map_err(corrupt)?;
            let mut seen = 0u64;
            while let Some(cell) = reader.next_cell().map_err(corrupt)? {
                let (row, col) = cell.get_position();
                let value = Data::from(cell.get_value().clone()).to_string();
                seen += 1;
                if seen > budget.limits.max_cells {
                    return Err(AttachmentError::limit(format!(
                        "the workbook has more than {} cells, the most an attachment may have; split it",
                        budget.limits.max_cells
                    )));
                }
                if seen.is_multiple_of(4096) {
                    budget.check_time()?;
                }
                if value.is_empty() {
                    continue;
                }
                first_col = first_col.min(col);
                cells.entry(row).or_default().insert(col, value);
            }
        }
        let mut rows: Vec<Vec<String>> = Vec::new();
        for (_, row) in cells {
            let last = row.keys().next_back().copied().unwrap_or(first_col);
            let width = (last - first_col + 1) as usize;
            budget.row(width)?;
            let mut out = vec![String::new(); width];
            for (col, value) in row {
                budget.chars(value.chars().count() as u64)?;
                out[(col - first_col) as usize] = value;
            }
            rows.push(out);
            if rows.len() >= budget.limits.page_rows.max(1) {
                budget.page()?;
                pages.push(Page {
                    content: PageContent::Rows(std::mem::take(&mut rows)),
                    sheet: Some(name.clone()),
                });
            }
        }
        if !rows.is_empty() {
            budget.page()?;
            pages.push(Page {
                content: PageContent::Rows(rows),
                sheet: Some(name.clone()),
            });
        }
    }
    Ok(pages)
}
