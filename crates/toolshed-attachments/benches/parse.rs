//! The attachment figures of BENCHMARKS.md, on `tests/fixtures/long-200.pdf` (200 pages
//! LibreOffice wrote):
//! - upload parse time of the PDF (all 200 pages' text), beside `pdftotext` (poppler)
//!   on the same file, median of 10 each;
//! - `read_attachment`'s store read of one page of the already parsed PDF, from the
//!   journal's attachment store on a SQLite file: p50 and p99 of 2,000 reads.
//!
//! Run: `cargo bench -p toolshed-attachments --bench parse` (or `bench/attachments.sh`).
#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use toolshed_attachments::{Limits, PageContent, parse};
use toolshed_core::{AttachmentScope, PageRequest};
use toolshed_journal::{Attachments, NewAttachment, NewPage, NewPageContent};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/long-200.pdf");
    let bytes = std::fs::read(&path).unwrap();
    let limits = Limits::default();

    let ours: Vec<Duration> = (0..10)
        .map(|_| {
            let t = Instant::now();
            let parsed = parse("long.pdf", &bytes, &limits).unwrap();
            assert_eq!(parsed.pages.len(), 200);
            t.elapsed()
        })
        .collect();
    let ours = median(ours);
    let poppler: Option<Duration> = Command::new("pdftotext").arg("-v").output().ok().map(|_| {
        median(
            (0..10)
                .map(|_| {
                    let t = Instant::now();
                    let out = Command::new("pdftotext")
                        .arg(&path)
                        .arg("-")
                        .output()
                        .unwrap();
                    assert!(out.status.success());
                    t.elapsed()
                })
                .collect(),
        )
    });
    println!(
        "parse long-200.pdf (200 pages): toolshed {:.1} ms",
        ours.as_secs_f64() * 1e3
    );
    match poppler {
        Some(p) => println!(
            "pdftotext on the same file: {:.1} ms (process start included); ratio toolshed/pdftotext {:.2}",
            p.as_secs_f64() * 1e3,
            ours.as_secs_f64() / p.as_secs_f64()
        ),
        None => println!("pdftotext not installed (apt-get install poppler-utils): no comparison"),
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("toolshed.db").display());
        let store = Attachments::open(&url).await.unwrap();
        let parsed = parse("long.pdf", &bytes, &limits).unwrap();
        let pages = parsed
            .pages
            .into_iter()
            .map(|p| NewPage {
                content: match p.content {
                    PageContent::Text(t) => NewPageContent::Text(t),
                    PageContent::Rows(r) => NewPageContent::Rows(r),
                },
                sheet: None,
            })
            .collect();
        store
            .insert(
                NewAttachment {
                    id: "att_bench".into(),
                    tenant: Some("acme".into()),
                    run_id: None,
                    session_id: Some("s".into()),
                    filename: "long.pdf".into(),
                    kind: "pdf".into(),
                    unit: "chars".into(),
                    media_type: "application/pdf".into(),
                    size_bytes: bytes.len() as u64,
                    sha256: String::new(),
                    blob_uri: String::new(),
                    uploaded_by: None,
                },
                pages,
            )
            .await
            .unwrap();
        let scope = AttachmentScope {
            tenant: Some("acme".into()),
            run_id: "r".into(),
            session_id: "s".into(),
        };
        let mut times = Vec::with_capacity(2000);
        for i in 0..2200u32 {
            let page = 1 + (i * 37) % 200;
            let t = Instant::now();
            let p = store
                .read_page(&scope, "att_bench", PageRequest::Page(page))
                .await
                .unwrap();
            let took = t.elapsed();
            assert_eq!(p.page, page);
            if i >= 200 {
                times.push(took);
            }
        }
        times.sort();
        let p50 = times[times.len() / 2];
        let p99 = times[times.len() * 99 / 100];
        println!(
            "read one page of the parsed 200-page PDF (SQLite store): p50 {:.3} ms, p99 {:.3} ms ({} reads)",
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            times.len()
        );
    });
}
