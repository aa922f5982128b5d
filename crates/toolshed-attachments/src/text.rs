//! Plain text, Markdown and CSV: UTF-8 text split into pages, CSV rows grouped into
//! pages.

use crate::{AttachmentError, Budget, Kind, Page, PageContent, split_text};

/// Text and Markdown: pages of about `page_chars` characters, ending at line ends.
pub(crate) fn text(
    kind: Kind,
    bytes: &[u8],
    budget: &mut Budget<'_>,
) -> Result<Vec<Page>, AttachmentError> {
    let text = std::str::from_utf8(bytes).map_err(|e| AttachmentError::corrupt(kind, e))?;
    // A byte-order mark is not text.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let text = text.replace("\r\n", "\n");
    budget.chars(text.chars().count() as u64)?;
    let mut pages = Vec::new();
    for chunk in split_text(&text, budget.limits.page_chars) {
        budget.page()?;
        pages.push(Page {
            content: PageContent::Text(chunk),
            sheet: None,
        });
    }
    Ok(pages)
}

/// CSV: rows of cells (quoted fields, embedded commas and line ends as RFC 4180 has
/// them), `page_rows` rows to a page. Rows may have different lengths.
pub(crate) fn csv(bytes: &[u8], budget: &mut Budget<'_>) -> Result<Vec<Page>, AttachmentError> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(bytes);
    let mut pages = Vec::new();
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut record = csv::StringRecord::new();
    loop {
        match reader.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => return Err(AttachmentError::corrupt(Kind::Csv, e)),
        }
        budget.row(record.len())?;
        let row: Vec<String> = record.iter().map(str::to_owned).collect();
        budget.chars(row.iter().map(|c| c.chars().count() as u64).sum())?;
        rows.push(row);
        if rows.len() >= budget.limits.page_rows.max(1) {
            budget.page()?;
            pages.push(Page {
                content: PageContent::Rows(std::mem::take(&mut rows)),
                sheet: None,
            });
        }
    }
    if !rows.is_empty() {
        budget.page()?;
        pages.push(Page {
            content: PageContent::Rows(rows),
            sheet: None,
        });
    }
    Ok(pages)
}
