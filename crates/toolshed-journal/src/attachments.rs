//! [`Attachments`]: the metadata and parsed pages of attached files, in the journal's
//! database (migration 4), beside the runs they belong to. The files themselves live in
//! the blob store; this store keeps what a read needs, one row per page, so reading a
//! page is one indexed lookup and never parses the file again.
//!
//! The rules are written once over the store's [`Executor`] and run on either database
//! (`tests/attachments.rs` is one suite on SQLite and PostgreSQL). Writes are rare (one
//! upload is one transaction), so the store uses `toolshed-store`'s [`Db`] rather than
//! the journal's group-commit writer.
//!
//! **Tenancy:** every lookup names the tenant, and a read also the run and session: an
//! attachment of another tenant, run or session is not found, never forbidden, so its
//! existence is not revealed.

use futures_util::future::BoxFuture;
use serde::Serialize;
use toolshed_core::{
    AttachmentPage, AttachmentReadError, AttachmentReader, AttachmentScope, NextPage, PageRequest,
};
use toolshed_store::{Db, DbError, DbOptions, Executor, Location, OpenError, Param, Row, Sql};

use crate::store::MIGRATIONS;
use crate::{JournalError, Result};

const OPTIONS: DbOptions = DbOptions {
    application_name: "toolshed-attachments",
    sqlite_readers: 4,
    postgres_readers: 1,
    statement_cache: 16,
};

/// A new attachment's metadata: who uploaded it, where it belongs, what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAttachment {
    /// Its id (the caller makes one, e.g. `att_<uuid>`).
    pub id: String,
    /// The uploader's tenant; `None` without one.
    pub tenant: Option<String>,
    /// The run it is attached to.
    pub run_id: Option<String>,
    /// The session it is attached to.
    pub session_id: Option<String>,
    /// The file name as uploaded.
    pub filename: String,
    /// `pdf`, `docx`, `xlsx`, `csv`, `text`, `markdown`.
    pub kind: String,
    /// `chars` or `rows`.
    pub unit: String,
    /// The media type stored with the file.
    pub media_type: String,
    /// The file's size.
    pub size_bytes: u64,
    /// Hex SHA-256 of the file.
    pub sha256: String,
    /// The file's blob URI.
    pub blob_uri: String,
    /// Who uploaded it (`iss|sub`, or the CLI user).
    pub uploaded_by: Option<String>,
}

/// One parsed page to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewPageContent {
    /// Text.
    Text(String),
    /// Rows of cells.
    Rows(Vec<Vec<String>>),
}

/// A page to store, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPage {
    /// The text or rows.
    pub content: NewPageContent,
    /// The sheet (xlsx).
    pub sheet: Option<String>,
}

impl NewPage {
    fn length(&self) -> u64 {
        match &self.content {
            NewPageContent::Text(t) => t.chars().count() as u64,
            NewPageContent::Rows(r) => r.len() as u64,
        }
    }
}

/// A stored attachment's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttachmentRecord {
    /// Its id.
    pub id: String,
    /// The uploader's tenant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The run it is attached to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The session it is attached to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The file name as uploaded.
    pub filename: String,
    /// `pdf`, `docx`, `xlsx`, `csv`, `text`, `markdown`.
    pub kind: String,
    /// `chars` or `rows`.
    pub unit: String,
    /// The media type.
    pub media_type: String,
    /// The file's size.
    pub size_bytes: u64,
    /// Hex SHA-256 of the file.
    pub sha256: String,
    /// The file's blob URI.
    pub blob_uri: String,
    /// How many pages it was parsed into.
    pub page_count: u32,
    /// Its whole length in `unit`.
    pub total_length: u64,
    /// Who uploaded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uploaded_by: Option<String>,
    /// When, in milliseconds since the Unix epoch.
    pub created_at_ms: i64,
}

/// The attachment store, on the journal's database.
#[derive(Debug)]
pub struct Attachments {
    db: Db,
}

impl Attachments {
    /// Open the store in the journal database at `url` (migrating it, like the journal).
    pub async fn open(url: &str) -> Result<Attachments> {
        Self::open_at(&Location::parse(url)?).await
    }

    /// [`Attachments::open`] at a parsed location (a PostgreSQL schema included).
    pub async fn open_at(location: &Location) -> Result<Attachments> {
        Ok(Attachments {
            db: Db::open(location, &MIGRATIONS, OPTIONS).await?,
        })
    }

    /// Store an attachment's metadata and its pages, in one transaction; returns the
    /// record. At least one of `run_id` and `session_id` must be given.
    pub async fn insert(
        &self,
        new: NewAttachment,
        pages: Vec<NewPage>,
    ) -> Result<AttachmentRecord> {
        if new.run_id.is_none() && new.session_id.is_none() {
            return Err(JournalError::Conflict(
                "an attachment belongs to a run or a session: give run_id or session_id".into(),
            ));
        }
        let created_at_ms = toolshed_store::time::now_ms();
        let record = AttachmentRecord {
            id: new.id,
            tenant: new.tenant,
            run_id: new.run_id,
            session_id: new.session_id,
            filename: new.filename,
            kind: new.kind,
            unit: new.unit,
            media_type: new.media_type,
            size_bytes: new.size_bytes,
            sha256: new.sha256,
            blob_uri: new.blob_uri,
            page_count: u32::try_from(pages.len()).unwrap_or(u32::MAX),
            total_length: pages.iter().map(NewPage::length).sum(),
            uploaded_by: new.uploaded_by,
            created_at_ms,
        };
        let stored = record.clone();
        self.db
            .write(move |tx| Box::pin(async move { insert_rule(tx, &stored, &pages).await }))
            .await?;
        Ok(record)
    }

    /// An attachment's metadata, as `tenant` may see it: another tenant's is not found.
    pub async fn get(&self, tenant: Option<&str>, id: &str) -> Result<AttachmentRecord> {
        let tenant = tenant.unwrap_or_default().to_owned();
        let id = id.to_owned();
        self.db
            .read(move |r| {
                Box::pin(async move {
                    match r.row(&GET, &[id.as_str().into(), tenant.into()]).await? {
                        Some(row) => Ok(decode(&row)?),
                        None => Err(JournalError::NotFound {
                            what: "attachment",
                            id,
                        }),
                    }
                })
            })
            .await
    }

    /// Whether any attachment, of any tenant, names blob `uri` (the same bytes uploaded
    /// twice are one blob). Asked before a pruned attachment's file is deleted; index
    /// `attachments_by_blob`.
    pub async fn blob_named(&self, uri: &str) -> Result<bool> {
        let uri = uri.to_owned();
        self.db
            .read(move |r| {
                Box::pin(async move { Ok(r.row(&BLOB_NAMED, &[uri.into()]).await?.is_some()) })
            })
            .await
    }

    /// Read part of an attachment as `scope` may see it (the rule behind
    /// [`AttachmentReader`]).
    pub async fn read_page(
        &self,
        scope: &AttachmentScope,
        id: &str,
        request: PageRequest,
    ) -> std::result::Result<AttachmentPage, AttachmentReadError> {
        let scope = scope.clone();
        let id = id.to_owned();
        self.db
            .read(move |r| Box::pin(async move { read_rule(r, &scope, &id, request).await }))
            .await
            .map_err(|e: ReadFailure| e.0)
    }
}

impl AttachmentReader for Attachments {
    fn read<'a>(
        &'a self,
        scope: &'a AttachmentScope,
        id: &'a str,
        request: PageRequest,
    ) -> BoxFuture<'a, std::result::Result<AttachmentPage, AttachmentReadError>> {
        Box::pin(self.read_page(scope, id, request))
    }
}

// ---- statements ----

const INSERT: Sql = Sql::same(
    "INSERT INTO attachments (id, tenant, run_id, session_id, filename, kind, unit, media_type, \
     size_bytes, sha256, blob_uri, page_count, total_length, uploaded_by, created_at_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
);
const INSERT_PAGE: Sql = Sql::same(
    "INSERT INTO attachment_pages (attachment_id, page, start, length, sheet, content) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
);
/// Whether an attachment names blob `?1` (index `attachments_by_blob`): asked by
/// [`Attachments::blob_named`] and inside a prune's batch.
pub(crate) const BLOB_NAMED: Sql =
    Sql::same("SELECT 1 FROM attachments WHERE blob_uri = ?1 LIMIT 1");
const GET: Sql = Sql::same(
    "SELECT id, tenant, run_id, session_id, filename, kind, unit, media_type, size_bytes, \
     sha256, blob_uri, page_count, total_length, uploaded_by, created_at_ms \
     FROM attachments WHERE id = ?1 AND tenant = ?2",
);
/// The attachment as a run may see it: its tenant, and its run or its session.
const FOR_RUN: Sql = Sql::same(
    "SELECT filename, kind, unit, page_count, total_length FROM attachments \
     WHERE id = ?1 AND tenant = ?2 AND (run_id = ?3 OR session_id = ?4)",
);
const PAGE: Sql = Sql::same(
    "SELECT page, start, length, sheet, content FROM attachment_pages \
     WHERE attachment_id = ?1 AND page = ?2",
);
const PAGE_AT: Sql = Sql::same(
    "SELECT page, start, length, sheet, content FROM attachment_pages \
     WHERE attachment_id = ?1 AND start <= ?2 ORDER BY start DESC, page DESC LIMIT 1",
);

// ---- rules ----

async fn insert_rule(tx: &mut dyn Executor, a: &AttachmentRecord, pages: &[NewPage]) -> Result<()> {
    let int = |n: u64| Param::Int(i64::try_from(n).unwrap_or(i64::MAX));
    tx.run(
        &INSERT,
        &[
            a.id.as_str().into(),
            a.tenant.clone().unwrap_or_default().into(),
            (&a.run_id).into(),
            (&a.session_id).into(),
            a.filename.as_str().into(),
            a.kind.as_str().into(),
            a.unit.as_str().into(),
            a.media_type.as_str().into(),
            int(a.size_bytes),
            a.sha256.as_str().into(),
            a.blob_uri.as_str().into(),
            a.page_count.into(),
            int(a.total_length),
            (&a.uploaded_by).into(),
            a.created_at_ms.into(),
        ],
    )
    .await?;
    let mut start = 0u64;
    for (i, page) in pages.iter().enumerate() {
        let length = page.length();
        let content = match &page.content {
            NewPageContent::Text(t) => t.clone(),
            NewPageContent::Rows(rows) => serde_json::to_string(rows)
                .map_err(|e| JournalError::Backend(format!("encoding rows: {e}")))?,
        };
        tx.run(
            &INSERT_PAGE,
            &[
                a.id.as_str().into(),
                Param::Int(i as i64 + 1),
                int(start),
                int(length),
                (&page.sheet).into(),
                content.into(),
            ],
        )
        .await?;
        start += length;
    }
    Ok(())
}

/// A failed read, carried through the store's error bounds.
struct ReadFailure(AttachmentReadError);

impl From<DbError> for ReadFailure {
    fn from(e: DbError) -> Self {
        ReadFailure(AttachmentReadError::Unavailable(e.message))
    }
}

impl From<OpenError> for ReadFailure {
    fn from(e: OpenError) -> Self {
        ReadFailure(AttachmentReadError::Unavailable(e.to_string()))
    }
}

fn out_of_range(message: String) -> ReadFailure {
    ReadFailure(AttachmentReadError::OutOfRange(message))
}

async fn read_rule(
    r: &mut dyn Executor,
    scope: &AttachmentScope,
    id: &str,
    request: PageRequest,
) -> std::result::Result<AttachmentPage, ReadFailure> {
    let tenant = scope.tenant.clone().unwrap_or_default();
    let Some(meta) = r
        .row(
            &FOR_RUN,
            &[
                id.into(),
                tenant.into(),
                scope.run_id.as_str().into(),
                scope.session_id.as_str().into(),
            ],
        )
        .await?
    else {
        return Err(ReadFailure(AttachmentReadError::NotFound {
            id: id.to_owned(),
        }));
    };
    let filename: String = meta.get(0)?;
    let kind: String = meta.get(1)?;
    let unit: String = meta.get(2)?;
    let page_count: u32 = meta.get(3)?;
    let total_length: u64 = meta.get(4)?;
    let row = match request {
        PageRequest::Page(page) => {
            if page == 0 || page > page_count {
                return Err(out_of_range(format!(
                    "page {page} does not exist: `{filename}` has pages 1 to {page_count}"
                )));
            }
            r.row(&PAGE, &[id.into(), page.into()]).await?
        }
        PageRequest::Range { offset, length } => {
            if length == 0 {
                return Err(out_of_range("length must be at least 1".to_owned()));
            }
            if offset >= total_length && !(offset == 0 && total_length == 0) {
                return Err(out_of_range(format!(
                    "offset {offset} is past the end: `{filename}` is {total_length} {unit} long (offsets from 0 to {})",
                    total_length.saturating_sub(1)
                )));
            }
            let at = i64::try_from(offset).unwrap_or(i64::MAX);
            r.row(&PAGE_AT, &[id.into(), Param::Int(at)]).await?
        }
    };
    let Some(row) = row else {
        return Err(ReadFailure(AttachmentReadError::Unavailable(format!(
            "attachment `{id}` has no stored page for this read; upload it again"
        ))));
    };
    let page: u32 = row.get(0)?;
    let start: u64 = row.get(1)?;
    let page_length: u64 = row.get(2)?;
    let sheet: Option<String> = row.get(3)?;
    let content: String = row.get(4)?;
    // The part of the page asked for, in the unit.
    let (skip, take) = match request {
        PageRequest::Page(_) => (0, page_length),
        PageRequest::Range { offset, length } => {
            let skip = offset.saturating_sub(start);
            (skip, length.min(page_length.saturating_sub(skip)))
        }
    };
    let (text, rows) = if unit == "rows" {
        let all: Vec<Vec<String>> = serde_json::from_str(&content).map_err(|e| {
            ReadFailure(AttachmentReadError::Unavailable(format!(
                "stored rows: {e}"
            )))
        })?;
        let part = all
            .into_iter()
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
            .take(usize::try_from(take).unwrap_or(usize::MAX))
            .collect();
        (None, Some(part))
    } else if skip == 0 && take == page_length {
        (Some(content), None)
    } else {
        let part: String = content
            .chars()
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
            .take(usize::try_from(take).unwrap_or(usize::MAX))
            .collect();
        (Some(part), None)
    };
    let offset = start + skip;
    let end = offset + take;
    let next = if end < start + page_length {
        Some(NextPage { page, offset: end })
    } else if page < page_count {
        Some(NextPage {
            page: page + 1,
            offset: end,
        })
    } else {
        None
    };
    Ok(AttachmentPage {
        attachment_id: id.to_owned(),
        filename,
        kind,
        unit,
        page,
        page_count,
        text,
        rows,
        sheet,
        offset,
        length: take,
        total_length,
        next,
    })
}

fn decode(row: &Row) -> std::result::Result<AttachmentRecord, DbError> {
    let tenant: String = row.get(1)?;
    Ok(AttachmentRecord {
        id: row.get(0)?,
        tenant: (!tenant.is_empty()).then_some(tenant),
        run_id: row.get(2)?,
        session_id: row.get(3)?,
        filename: row.get(4)?,
        kind: row.get(5)?,
        unit: row.get(6)?,
        media_type: row.get(7)?,
        size_bytes: row.get(8)?,
        sha256: row.get(9)?,
        blob_uri: row.get(10)?,
        page_count: row.get(11)?,
        total_length: row.get(12)?,
        uploaded_by: row.get(13)?,
        created_at_ms: row.get(14)?,
    })
}
