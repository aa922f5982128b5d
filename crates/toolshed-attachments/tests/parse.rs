//! The parsers against real files: documents LibreOffice wrote (docx, xlsx, PDF), an
//! encrypted PDF (qpdf), a damaged one, and hostile files (zip and flate bombs, a zip
//! whose headers lie, a huge page tree, deep XML). `tests/fixtures/make.sh` makes them.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use toolshed_attachments::{AttachmentCode, Kind, Limits, PageContent, Parsed, parse};

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn text(parsed: &Parsed, page: usize) -> &str {
    match &parsed.pages[page].content {
        PageContent::Text(t) => t,
        PageContent::Rows(_) => panic!("page {page} is rows"),
    }
}

fn rows(parsed: &Parsed, page: usize) -> &[Vec<String>] {
    match &parsed.pages[page].content {
        PageContent::Rows(r) => r,
        PageContent::Text(_) => panic!("page {page} is text"),
    }
}

fn refused(name: &str, bytes: &[u8], limits: &Limits) -> (AttachmentCode, String) {
    let e = parse(name, bytes, limits).expect_err(name);
    (e.code, e.message)
}

#[test]
fn a_pdf_libreoffice_wrote_is_read_page_by_page() {
    let parsed = parse("report.pdf", &fixture("sample.pdf"), &Limits::default()).unwrap();
    assert_eq!(parsed.kind, Kind::Pdf);
    assert_eq!(parsed.pages.len(), 3, "{parsed:#?}");
    let first = text(&parsed, 0);
    assert!(first.contains("Quarterly report"), "{first:?}");
    assert!(
        first.contains("Zürich") && first.contains("Kraków"),
        "{first:?}"
    );
    assert!(text(&parsed, 1).contains("cost review"), "{parsed:#?}");
    assert!(!text(&parsed, 1).contains("outlook"), "{parsed:#?}");
    assert!(text(&parsed, 2).contains("outlook"), "{parsed:#?}");
}

#[test]
fn a_docx_is_read_as_paragraphs_with_its_page_breaks() {
    let parsed = parse("report.docx", &fixture("sample.docx"), &Limits::default()).unwrap();
    assert_eq!(parsed.kind, Kind::Docx);
    assert_eq!(parsed.pages.len(), 3, "{parsed:#?}");
    let first = text(&parsed, 0);
    assert!(first.starts_with("Quarterly report\n"), "{first:?}");
    assert!(
        first.contains("Revenue grew by twelve percent in the third quarter.\n"),
        "{first:?}"
    );
    assert!(first.contains("Zürich and Kraków"), "{first:?}");
    assert!(
        text(&parsed, 1).starts_with("Page two starts with the cost review."),
        "{parsed:#?}"
    );
    assert!(text(&parsed, 2).contains("outlook"), "{parsed:#?}");
}

#[test]
fn an_xlsx_is_read_as_rows_of_each_sheet() {
    let parsed = parse("orders.xlsx", &fixture("sample.xlsx"), &Limits::default()).unwrap();
    assert_eq!(parsed.kind, Kind::Xlsx);
    assert_eq!(parsed.pages.len(), 2, "{parsed:#?}");
    assert_eq!(parsed.pages[0].sheet.as_deref(), Some("Orders"));
    assert_eq!(
        rows(&parsed, 0),
        [
            vec!["order", "customer", "amount"],
            vec!["1001", "Acme", "250.5"],
            vec!["1002", "Globex", "99"],
        ]
    );
    assert_eq!(parsed.pages[1].sheet.as_deref(), Some("Notes"));
    assert_eq!(rows(&parsed, 1), [vec!["note"], vec!["Ship by Friday"]]);
}

#[test]
fn csv_rows_keep_quoted_commas_and_line_ends_and_are_paged() {
    let csv = "name,comment\n\"Smith, J\",\"two\nlines\"\nLee,ok\n";
    let parsed = parse("people.csv", csv.as_bytes(), &Limits::default()).unwrap();
    assert_eq!(parsed.kind, Kind::Csv);
    assert_eq!(
        rows(&parsed, 0),
        [
            vec!["name", "comment"],
            vec!["Smith, J", "two\nlines"],
            vec!["Lee", "ok"]
        ]
    );
    let many: String = (0..250).map(|i| format!("{i},x\n")).collect();
    let limits = Limits::default();
    let parsed = parse("many.csv", many.as_bytes(), &limits).unwrap();
    assert_eq!(parsed.pages.len(), 3);
    assert_eq!(rows(&parsed, 2).len(), 50);
    assert_eq!(rows(&parsed, 2)[0], vec!["200", "x"]);
}

#[test]
fn text_and_markdown_are_paged_at_line_ends() {
    let line = "a line of text that is forty chars long\n";
    let body = line.repeat(250);
    let parsed = parse("notes.md", body.as_bytes(), &Limits::default()).unwrap();
    assert_eq!(parsed.kind, Kind::Markdown);
    assert_eq!(parsed.pages.len(), 3);
    for page in &parsed.pages[..2] {
        let PageContent::Text(t) = &page.content else {
            panic!()
        };
        assert!(
            t.ends_with('\n') && t.chars().count() <= 4000,
            "{}",
            t.len()
        );
    }
    let joined: String = (0..3).map(|i| text(&parsed, i)).collect();
    assert_eq!(joined, body);
    let parsed = parse("empty.txt", b"", &Limits::default()).unwrap();
    assert_eq!(parsed.pages.len(), 1);
    assert_eq!(text(&parsed, 0), "");
}

#[test]
fn an_encrypted_pdf_is_refused_as_encrypted() {
    let (code, message) = refused("secret.pdf", &fixture("encrypted.pdf"), &Limits::default());
    assert_eq!(code, AttachmentCode::AttachmentEncrypted, "{message}");
    assert!(message.contains("qpdf --decrypt"), "{message}");
}

#[test]
fn damaged_and_mislabelled_files_are_refused_as_corrupt() {
    let (code, message) = refused("broken.pdf", &fixture("corrupt.pdf"), &Limits::default());
    assert_eq!(code, AttachmentCode::AttachmentCorrupt, "{message}");
    let (code, _) = refused("x.docx", b"this is not a docx", &Limits::default());
    assert_eq!(code, AttachmentCode::AttachmentCorrupt);
    // A docx cut short: the zip's central directory is gone.
    let docx = fixture("sample.docx");
    let (code, _) = refused("cut.docx", &docx[..docx.len() / 2], &Limits::default());
    assert_eq!(code, AttachmentCode::AttachmentCorrupt);
    let (code, _) = refused("x.csv", b"a,b\n\xff\xfe,c\n", &Limits::default());
    assert_eq!(code, AttachmentCode::AttachmentCorrupt);
}

#[test]
fn unknown_kinds_are_refused_as_unsupported() {
    let (code, message) = refused(
        "logo.png",
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
        &Limits::default(),
    );
    assert_eq!(code, AttachmentCode::AttachmentUnsupported, "{message}");
    assert!(message.contains("PDF, docx, xlsx"), "{message}");
    // A zip that is not an Office document.
    let mut zip = Vec::new();
    {
        // The smallest valid zip: an empty central directory.
        zip.extend_from_slice(b"PK\x05\x06");
        zip.extend_from_slice(&[0; 18]);
    }
    let (code, _) = refused("bundle.zip", &zip, &Limits::default());
    assert_eq!(code, AttachmentCode::AttachmentUnsupported);
}

#[test]
fn a_file_over_the_size_limit_is_refused_before_parsing() {
    let limits = Limits {
        max_file_bytes: 1000,
        ..Limits::default()
    };
    let (code, message) = refused("big.txt", &[b'a'; 1001], &limits);
    assert_eq!(code, AttachmentCode::AttachmentTooLarge);
    assert!(
        message.contains("1001") && message.contains("1000"),
        "{message}"
    );
}

#[test]
fn zip_bombs_in_docx_and_xlsx_stop_at_the_inflated_cap() {
    // 256 MiB inside 256 KiB: refused at the default 64 MiB.
    for name in ["bomb.docx", "bomb.xlsx"] {
        let (code, message) = refused(name, &fixture(name), &Limits::default());
        assert_eq!(
            code,
            AttachmentCode::AttachmentLimitExceeded,
            "{name}: {message}"
        );
        assert!(message.contains("zip bomb"), "{message}");
    }
}

#[test]
fn a_zip_whose_headers_lie_about_sizes_is_refused() {
    // The headers say 100 bytes; the data inflates to 64 MiB. Counting what comes out
    // (not what the headers say) refuses it, or the zip reader stops at the declared
    // size and the checksum fails: never 64 MiB read.
    let limits = Limits {
        max_inflated_bytes: 1024 * 1024,
        ..Limits::default()
    };
    let (code, message) = refused("lying.docx", &fixture("lying.docx"), &limits);
    assert!(
        matches!(
            code,
            AttachmentCode::AttachmentLimitExceeded | AttachmentCode::AttachmentCorrupt
        ),
        "{code:?}: {message}"
    );
}

#[test]
fn a_flate_bomb_in_a_pdf_page_stops_at_the_stream_cap() {
    let (code, message) = refused("bomb.pdf", &fixture("bomb-stream.pdf"), &Limits::default());
    assert_eq!(code, AttachmentCode::AttachmentLimitExceeded, "{message}");
    assert!(message.contains("decompression bomb"), "{message}");
}

#[test]
fn a_pdf_with_more_pages_than_allowed_is_refused() {
    let (code, message) = refused("many.pdf", &fixture("many-pages.pdf"), &Limits::default());
    assert_eq!(code, AttachmentCode::AttachmentLimitExceeded, "{message}");
    assert!(message.contains("2000 pages"), "{message}");
    // Under the limit, the same tree is read: 5,000 empty pages.
    let limits = Limits {
        max_pages: 5000,
        ..Limits::default()
    };
    let parsed = parse("many.pdf", &fixture("many-pages.pdf"), &limits).unwrap();
    assert_eq!(parsed.pages.len(), 5000);
}

#[test]
fn deeply_nested_xml_is_refused() {
    let (code, message) = refused("deep.docx", &fixture("deep.docx"), &Limits::default());
    assert_eq!(code, AttachmentCode::AttachmentLimitExceeded, "{message}");
    assert!(message.contains("nests deeper"), "{message}");
}

#[test]
fn caps_on_text_rows_and_time_are_refusals() {
    let limits = Limits {
        max_total_chars: 100,
        ..Limits::default()
    };
    let (code, _) = refused("long.txt", &[b'a'; 101], &limits);
    assert_eq!(code, AttachmentCode::AttachmentLimitExceeded);
    let limits = Limits {
        max_rows: 10,
        ..Limits::default()
    };
    let csv: String = (0..11).map(|i| format!("{i}\n")).collect();
    let (code, _) = refused("rows.csv", csv.as_bytes(), &limits);
    assert_eq!(code, AttachmentCode::AttachmentLimitExceeded);
    // No time at all: the first check after a page refuses.
    let limits = Limits {
        max_parse_time: Duration::ZERO,
        ..Limits::default()
    };
    let (code, message) = refused("long.pdf", &fixture("long-200.pdf"), &limits);
    assert_eq!(code, AttachmentCode::AttachmentLimitExceeded, "{message}");
    assert!(message.contains("longer than"), "{message}");
}

#[test]
fn the_200_page_pdf_has_200_pages_of_text() {
    let parsed = parse("long.pdf", &fixture("long-200.pdf"), &Limits::default()).unwrap();
    assert_eq!(parsed.pages.len(), 200);
    assert!(
        text(&parsed, 0).contains("Page 1 of the long report"),
        "{:?}",
        text(&parsed, 0)
    );
    assert!(text(&parsed, 199).contains("Page 200 of the long report"));
}

#[test]
fn a_sparse_sheet_is_never_a_dense_grid() {
    // A1 and XFD1048576: 17 billion cells as a grid. Read cell by cell, the far row's
    // 16,384-wide gap is counted against the cell cap.
    let limits = Limits {
        max_cells: 10_000,
        ..Limits::default()
    };
    let (code, message) = refused("sparse.xlsx", &fixture("sparse.xlsx"), &limits);
    assert_eq!(code, AttachmentCode::AttachmentLimitExceeded, "{message}");
    // Under the default cap it is two rows.
    let parsed = parse("sparse.xlsx", &fixture("sparse.xlsx"), &Limits::default()).unwrap();
    assert_eq!(rows(&parsed, 0).len(), 2);
    assert_eq!(rows(&parsed, 0)[0], vec!["first"]);
    assert_eq!(rows(&parsed, 0)[1].len(), 16_384);
    assert_eq!(rows(&parsed, 0)[1][16_383], "last");
}
