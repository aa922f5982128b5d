//! The attachment store's suite: written once, run on SQLite (a temporary file) and on
//! the local PostgreSQL (a fresh schema per test). Tenancy (another tenant's, run's or
//! session's attachment is not found), paging by page and by offset, and the store
//! sharing the journal's database.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use toolshed_core::{AttachmentReadError, AttachmentScope, PageRequest};
use toolshed_journal::{Attachments, JournalError, NewAttachment, NewPage, NewPageContent};
use toolshed_store::testing::{Scratch, on_postgres, on_sqlite};

macro_rules! suite {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    crate::on_sqlite(crate::$test).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    crate::on_postgres(crate::$test).await;
                }
            )*
        }
    };
}

suite!(
    pages_are_read_by_number_and_by_offset,
    another_tenants_run_or_session_finds_nothing,
    rows_are_paged_by_row,
    an_attachment_needs_a_run_or_a_session,
    the_store_shares_the_journals_database,
);

async fn open(store: &Scratch) -> Attachments {
    Attachments::open_at(&store.location()).await.expect("open")
}

fn new(id: &str, tenant: Option<&str>, run: Option<&str>, session: Option<&str>) -> NewAttachment {
    NewAttachment {
        id: id.into(),
        tenant: tenant.map(Into::into),
        run_id: run.map(Into::into),
        session_id: session.map(Into::into),
        filename: "report.pdf".into(),
        kind: "pdf".into(),
        unit: "chars".into(),
        media_type: "application/pdf".into(),
        size_bytes: 1234,
        sha256: "ab".repeat(32),
        blob_uri: format!("blob:sha256:{}", "ab".repeat(32)),
        uploaded_by: Some("local|alice".into()),
    }
}

fn text_pages(texts: &[&str]) -> Vec<NewPage> {
    texts
        .iter()
        .map(|t| NewPage {
            content: NewPageContent::Text((*t).into()),
            sheet: None,
        })
        .collect()
}

fn scope(tenant: Option<&str>, run: &str, session: &str) -> AttachmentScope {
    AttachmentScope {
        tenant: tenant.map(Into::into),
        run_id: run.into(),
        session_id: session.into(),
    }
}

async fn pages_are_read_by_number_and_by_offset(store: Scratch) {
    let a = open(&store).await;
    let record = a
        .insert(
            new("att_1", Some("acme"), Some("run-1"), None),
            text_pages(&["first page\n", "second pägé\n", "third\n"]),
        )
        .await
        .unwrap();
    assert_eq!(record.page_count, 3);
    assert_eq!(record.total_length, 11 + 12 + 6);
    assert_eq!(a.get(Some("acme"), "att_1").await.unwrap(), record);

    let s = scope(Some("acme"), "run-1", "any");
    let p = a
        .read_page(&s, "att_1", PageRequest::Page(2))
        .await
        .unwrap();
    assert_eq!(p.page, 2);
    assert_eq!(p.page_count, 3);
    assert_eq!(p.text.as_deref(), Some("second pägé\n"));
    assert_eq!((p.offset, p.length), (11, 12));
    let next = p.next.unwrap();
    assert_eq!((next.page, next.offset), (3, 23));
    let last = a
        .read_page(&s, "att_1", PageRequest::Page(3))
        .await
        .unwrap();
    assert!(last.next.is_none());

    // By offset: characters, not bytes; a read stops at its page's end.
    let p = a
        .read_page(
            &s,
            "att_1",
            PageRequest::Range {
                offset: 18,
                length: 100,
            },
        )
        .await
        .unwrap();
    assert_eq!(p.page, 2);
    assert_eq!(p.text.as_deref(), Some("pägé\n"));
    assert_eq!((p.offset, p.length), (18, 5));
    assert_eq!(p.next.unwrap().offset, 23);
    let p = a
        .read_page(
            &s,
            "att_1",
            PageRequest::Range {
                offset: 2,
                length: 3,
            },
        )
        .await
        .unwrap();
    assert_eq!(p.text.as_deref(), Some("rst"));
    let next = p.next.unwrap();
    assert_eq!((next.page, next.offset), (1, 5));

    for bad in [PageRequest::Page(0), PageRequest::Page(4)] {
        let e = a.read_page(&s, "att_1", bad).await.unwrap_err();
        assert!(
            matches!(&e, AttachmentReadError::OutOfRange(m) if m.contains("pages 1 to 3")),
            "{e}"
        );
    }
    let e = a
        .read_page(
            &s,
            "att_1",
            PageRequest::Range {
                offset: 29,
                length: 1,
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, AttachmentReadError::OutOfRange(m) if m.contains("past the end")),
        "{e}"
    );
}

async fn another_tenants_run_or_session_finds_nothing(store: Scratch) {
    let a = open(&store).await;
    a.insert(
        new("att_run", Some("acme"), Some("run-1"), None),
        text_pages(&["secret of run 1"]),
    )
    .await
    .unwrap();
    a.insert(
        new("att_session", Some("acme"), None, Some("session-1")),
        text_pages(&["shared in session 1"]),
    )
    .await
    .unwrap();
    let page = PageRequest::Page(1);
    // The run, and any run of the session, read them.
    assert!(
        a.read_page(&scope(Some("acme"), "run-1", "x"), "att_run", page)
            .await
            .is_ok()
    );
    assert!(
        a.read_page(
            &scope(Some("acme"), "run-9", "session-1"),
            "att_session",
            page
        )
        .await
        .is_ok()
    );
    // Another tenant, another run, another session, no tenant: not found, the same
    // answer as an id nobody has.
    for (s, id) in [
        (scope(Some("globex"), "run-1", "session-1"), "att_run"),
        (scope(Some("globex"), "run-1", "session-1"), "att_session"),
        (scope(None, "run-1", "session-1"), "att_run"),
        (scope(Some("acme"), "run-2", "session-1"), "att_run"),
        (scope(Some("acme"), "run-1", "session-2"), "att_session"),
        (scope(Some("acme"), "run-1", "session-1"), "att_nobody"),
    ] {
        let e = a.read_page(&s, id, page).await.unwrap_err();
        assert_eq!(e, AttachmentReadError::NotFound { id: id.into() }, "{s:?}");
    }
    let e = a.get(Some("globex"), "att_run").await.unwrap_err();
    assert!(
        matches!(
            e,
            JournalError::NotFound {
                what: "attachment",
                ..
            }
        ),
        "{e}"
    );
    let e = a.get(None, "att_run").await.unwrap_err();
    assert!(matches!(e, JournalError::NotFound { .. }), "{e}");
}

async fn rows_are_paged_by_row(store: Scratch) {
    let a = open(&store).await;
    let rows = |from: usize, n: usize| -> Vec<Vec<String>> {
        (from..from + n)
            .map(|i| vec![i.to_string(), format!("name {i}")])
            .collect()
    };
    let mut new = new("att_x", None, None, Some("s"));
    new.kind = "xlsx".into();
    new.unit = "rows".into();
    let pages = vec![
        NewPage {
            content: NewPageContent::Rows(rows(0, 100)),
            sheet: Some("Orders".into()),
        },
        NewPage {
            content: NewPageContent::Rows(rows(100, 20)),
            sheet: Some("Notes".into()),
        },
    ];
    let record = a.insert(new, pages).await.unwrap();
    assert_eq!(record.total_length, 120);
    let s = scope(None, "r", "s");
    let p = a
        .read_page(&s, "att_x", PageRequest::Page(2))
        .await
        .unwrap();
    assert_eq!(p.sheet.as_deref(), Some("Notes"));
    assert_eq!(p.rows.as_ref().unwrap().len(), 20);
    assert!(p.text.is_none());
    let p = a
        .read_page(
            &s,
            "att_x",
            PageRequest::Range {
                offset: 98,
                length: 5,
            },
        )
        .await
        .unwrap();
    assert_eq!(p.rows.unwrap(), rows(98, 2));
    assert_eq!(p.sheet.as_deref(), Some("Orders"));
    let next = p.next.unwrap();
    assert_eq!((next.page, next.offset), (2, 100));
}

async fn an_attachment_needs_a_run_or_a_session(store: Scratch) {
    let a = open(&store).await;
    let e = a
        .insert(new("att_none", None, None, None), text_pages(&["x"]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("run_id or session_id"), "{e}");
    // A taken id is refused whole: no page of the second insert is stored.
    a.insert(new("att_dup", None, Some("r"), None), text_pages(&["one"]))
        .await
        .unwrap();
    assert!(
        a.insert(
            new("att_dup", None, Some("r"), None),
            text_pages(&["two", "three"])
        )
        .await
        .is_err()
    );
    let p = a
        .read_page(&scope(None, "r", "s"), "att_dup", PageRequest::Page(1))
        .await
        .unwrap();
    assert_eq!((p.text.as_deref(), p.page_count), (Some("one"), 1));
}

async fn the_store_shares_the_journals_database(store: Scratch) {
    // Either opens first; both see one migrated database.
    let a = open(&store).await;
    let journal = toolshed_journal::SqlJournal::open(&store.location())
        .await
        .unwrap();
    assert!(journal.applied_migrations().is_empty());
    a.insert(new("att_j", None, Some("r"), None), text_pages(&["x"]))
        .await
        .unwrap();
    drop(a);
    let again = open(&store).await;
    assert_eq!(again.get(None, "att_j").await.unwrap().id, "att_j");
}
