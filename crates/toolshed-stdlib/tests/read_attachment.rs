//! `read_attachment` through the real pipeline, on a real attachment store (the
//! journal's, on a SQLite file) holding a real PDF parsed by toolshed-attachments: pages
//! by number and by offset, tenancy (another tenant's, run's or session's id is not
//! found), and every bad input.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use toolshed_attachments::{Limits, PageContent, parse};
use toolshed_core::{ErrorCode, Pipeline, Principal, RunContext, ToolCall, ToolError, ToolSet};
use toolshed_journal::{Attachments, NewAttachment, NewPage, NewPageContent};

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<Attachments>,
    pipeline: Pipeline,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("toolshed.db").display());
    let store = Arc::new(Attachments::open(&url).await.unwrap());
    let bytes = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../toolshed-attachments/tests/fixtures/sample.pdf"),
    )
    .unwrap();
    let parsed = parse("report.pdf", &bytes, &Limits::default()).unwrap();
    let pages = parsed
        .pages
        .into_iter()
        .map(|p| NewPage {
            content: match p.content {
                PageContent::Text(t) => NewPageContent::Text(t),
                PageContent::Rows(r) => NewPageContent::Rows(r),
            },
            sheet: p.sheet,
        })
        .collect();
    store
        .insert(
            NewAttachment {
                id: "att_report".into(),
                tenant: Some("acme".into()),
                run_id: None,
                session_id: Some("session-1".into()),
                filename: "report.pdf".into(),
                kind: "pdf".into(),
                unit: "chars".into(),
                media_type: "application/pdf".into(),
                size_bytes: bytes.len() as u64,
                sha256: "00".repeat(32),
                blob_uri: "blob:sha256:00".into(),
                uploaded_by: None,
            },
            pages,
        )
        .await
        .unwrap();
    let pipeline =
        Pipeline::builder(ToolSet::from_tools(toolshed_stdlib::tools()).unwrap()).build();
    Fixture {
        _dir: dir,
        store,
        pipeline,
    }
}

fn run(f: &Fixture, tenant: Option<&str>, session: &str) -> RunContext {
    let mut b = RunContext::builder()
        .session_id(session)
        .attachments(f.store.clone());
    if let Some(t) = tenant {
        b = b.principal(Principal {
            iss: "test".into(),
            sub: "alice".into(),
            tenant: Some(t.into()),
        });
    }
    b.build()
}

async fn call(f: &Fixture, run: &RunContext, args: Value) -> Result<Value, ToolError> {
    f.pipeline
        .call(run, ToolCall::new("read_attachment", args))
        .await
        .result
}

#[tokio::test]
async fn a_run_of_the_session_reads_pages_and_ranges() {
    let f = fixture().await;
    let r = run(&f, Some("acme"), "session-1");
    let page = call(&f, &r, json!({"attachment_id": "att_report"}))
        .await
        .unwrap();
    assert_eq!(page["page"], 1);
    assert_eq!(page["page_count"], 3);
    assert!(
        page["text"].as_str().unwrap().contains("Quarterly report"),
        "{page}"
    );
    assert_eq!(page["next"]["page"], 2);
    let two = call(&f, &r, json!({"attachment_id": "att_report", "page": 2}))
        .await
        .unwrap();
    assert!(
        two["text"].as_str().unwrap().contains("cost review"),
        "{two}"
    );
    assert_eq!(two["offset"], page["length"]);
    let part = call(
        &f,
        &r,
        json!({"attachment_id": "att_report", "offset": 0, "length": 9}),
    )
    .await
    .unwrap();
    assert_eq!(part["text"], "Quarterly");
    assert_eq!(part["next"], json!({"page": 1, "offset": 9}));
}

#[tokio::test]
async fn another_tenant_run_or_session_gets_not_found() {
    let f = fixture().await;
    for r in [
        run(&f, Some("globex"), "session-1"),
        run(&f, None, "session-1"),
        run(&f, Some("acme"), "session-2"),
    ] {
        let e = call(&f, &r, json!({"attachment_id": "att_report"}))
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::AttachmentNotFound, "{e:?}");
        assert!(!e.message.contains("Quarterly"), "{e:?}");
    }
    let r = run(&f, Some("acme"), "session-1");
    let e = call(&f, &r, json!({"attachment_id": "att_other"}))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::AttachmentNotFound);
}

#[tokio::test]
async fn bad_inputs_are_invalid_args() {
    let f = fixture().await;
    let r = run(&f, Some("acme"), "session-1");
    for args in [
        json!({}),
        json!({"attachment_id": ""}),
        json!({"attachment_id": "att_report", "page": 0}),
        json!({"attachment_id": "att_report", "page": -1}),
        json!({"attachment_id": "att_report", "page": "2"}),
        json!({"attachment_id": "att_report", "offset": -5}),
        json!({"attachment_id": "att_report", "length": 0}),
        json!({"attachment_id": "att_report", "length": 100_001}),
        json!({"attachment_id": "att_report", "page": 1, "offset": 0}),
        json!({"attachment_id": "att_report", "page": 1, "length": 10}),
        json!({"attachment_id": "att_report", "page": 4}),
        json!({"attachment_id": "att_report", "offset": 1_000_000}),
        json!({"attachment_id": "att_report", "path": "/etc/passwd"}),
    ] {
        let e = call(&f, &r, args.clone()).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgs, "{args}: {e:?}");
    }
}

#[tokio::test]
async fn without_an_attachment_store_the_error_says_where_it_runs() {
    let f = fixture().await;
    let r = RunContext::builder().build();
    let e = call(&f, &r, json!({"attachment_id": "att_report"}))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::HandlerError);
    assert!(e.message.contains("attachment store"), "{e:?}");
}
