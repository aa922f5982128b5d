//! `/api/v1/attachments`: attaching a file to a run or a session (parsed once, here,
//! into pages), and reading an attachment's metadata. The tool `read_attachment` reads
//! the pages later through the runtime's attachment store.
//!
//! [`upload`] is the one upload path: the CLI's `toolshed attach` calls it too.

use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body as RawBody;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use toolshed_api::{ApiCode, Data, ErrorEnvelope};
use toolshed_attachments::{AttachmentCode, AttachmentError, Limits, PageContent};
use toolshed_auth::Role;
use toolshed_core::BlobStore;
use toolshed_journal::{
    AttachmentRecord, Attachments, JournalError, NewAttachment, NewPage, NewPageContent,
};
use toolshed_providers::LocalBlobStore;
use utoipa::{IntoParams, ToSchema};

use crate::Json;
use crate::error::ApiError;
use crate::extract::{Auth, Deployer, Query};
use crate::state::AppState;

/// The env var naming the folder attachments' files are stored in.
pub const BLOB_DIR_ENV: &str = "TOOLSHED_BLOB_DIR";

/// The longest file name, run id or session id accepted.
const MAX_NAME: usize = 255;

/// Where attachments' files go for the journal at `database_url`: `$TOOLSHED_BLOB_DIR`,
/// else a `blobs` folder beside a SQLite journal, else `./toolshed-blobs`.
pub fn blob_dir(database_url: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os(BLOB_DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    match toolshed_store::Location::parse(database_url) {
        Ok(toolshed_store::Location::Sqlite { path }) => path
            .parent()
            .map_or_else(|| PathBuf::from("blobs"), |p| p.join("blobs")),
        _ => PathBuf::from("toolshed-blobs"),
    }
}

/// Who uploads, and where the attachment belongs.
#[derive(Debug, Clone)]
pub struct Upload<'a> {
    /// The uploader's tenant (the run principal's tenant that may read it).
    pub tenant: Option<String>,
    /// The run it is attached to.
    pub run_id: Option<String>,
    /// The session it is attached to.
    pub session_id: Option<String>,
    /// The file name (its extension helps tell the kind).
    pub filename: &'a str,
    /// Who uploads, for the record.
    pub uploaded_by: Option<String>,
}

/// Why an upload failed.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// A field is wrong (the field, and why).
    #[error("`{0}` {1}")]
    Field(&'static str, String),
    /// The file was refused by its parser.
    #[error("{0} [{code}]", code = .0.code)]
    Refused(AttachmentError),
    /// The blob store failed.
    #[error("cannot store the file: {0}")]
    Blob(String),
    /// The journal failed.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

impl From<UploadError> for ApiError {
    fn from(e: UploadError) -> Self {
        match e {
            UploadError::Field(field, message) => ApiError::field(field, message),
            UploadError::Refused(refused) => {
                let code = match refused.code {
                    AttachmentCode::AttachmentTooLarge => ApiCode::PayloadTooLarge,
                    AttachmentCode::AttachmentEncrypted => ApiCode::AttachmentEncrypted,
                    AttachmentCode::AttachmentCorrupt => ApiCode::AttachmentCorrupt,
                    AttachmentCode::AttachmentLimitExceeded => ApiCode::AttachmentLimitExceeded,
                    _ => ApiCode::AttachmentUnsupported,
                };
                ApiError::new(code, refused.message)
            }
            UploadError::Blob(message) => {
                ApiError::internal("storing an attachment", std::io::Error::other(message))
            }
            UploadError::Journal(e) => ApiError::from(e),
        }
    }
}

/// Check a file name, run id or session id as an upload takes it: 1 to 255 characters,
/// none of them a control character. The CLI checks `--session` with it too, so a run
/// is never started under a session id no attachment could have.
pub fn check_name(field: &'static str, value: &str) -> Result<(), UploadError> {
    if value.is_empty() || value.len() > MAX_NAME || value.chars().any(char::is_control) {
        return Err(UploadError::Field(
            field,
            format!("must be 1 to {MAX_NAME} characters without control characters"),
        ));
    }
    Ok(())
}

/// Check, parse (once), store the file in the blob store and its pages in the journal.
pub async fn upload(
    store: &Attachments,
    blobs: &dyn BlobStore,
    limits: &Limits,
    upload: Upload<'_>,
    bytes: Vec<u8>,
) -> Result<AttachmentRecord, UploadError> {
    check_name("filename", upload.filename)?;
    for (field, value) in [
        ("run_id", &upload.run_id),
        ("session_id", &upload.session_id),
    ] {
        if let Some(v) = value {
            check_name(field, v)?;
        }
    }
    if upload.run_id.is_none() && upload.session_id.is_none() {
        return Err(UploadError::Field(
            "run_id",
            "or `session_id` is needed: an attachment belongs to a run or a session".into(),
        ));
    }
    // Parsing is CPU work with its own time cap: off the async threads.
    let filename = upload.filename.to_owned();
    let limits = *limits;
    let (parsed, bytes) = tokio::task::spawn_blocking(move || {
        let parsed = toolshed_attachments::parse(&filename, &bytes, &limits);
        (parsed, bytes)
    })
    .await
    .map_err(|e| UploadError::Blob(format!("the parser stopped: {e}")))?;
    let parsed = parsed.map_err(UploadError::Refused)?;
    let blob = blobs
        .put(&bytes, Some(parsed.kind.media_type()))
        .await
        .map_err(|e| UploadError::Blob(e.message))?;
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
    let record = store
        .insert(
            NewAttachment {
                id: format!("att_{}", uuid::Uuid::now_v7().simple()),
                tenant: upload.tenant,
                run_id: upload.run_id,
                session_id: upload.session_id,
                filename: upload.filename.to_owned(),
                kind: parsed.kind.as_str().to_owned(),
                unit: parsed.kind.unit().as_str().to_owned(),
                media_type: parsed.kind.media_type().to_owned(),
                size_bytes: bytes.len() as u64,
                sha256: hex::encode(Sha256::digest(&bytes)),
                blob_uri: blob.uri,
                uploaded_by: upload.uploaded_by,
            },
            pages,
        )
        .await?;
    // Stored again now that the record names it: a prune releasing the same bytes at
    // this moment may have taken the file aside before it could see the record
    // (`LocalBlobStore::release`); this puts it back. A file in place is not rewritten.
    blobs
        .put(&bytes, Some(parsed.kind.media_type()))
        .await
        .map_err(|e| UploadError::Blob(e.message))?;
    Ok(record)
}

/// What [`release_blobs`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReleasedBlobs {
    /// Files deleted.
    pub removed: u64,
    /// Files kept because an attachment names their blob again.
    pub kept: u64,
    /// Files that could not be deleted, each with why (they stay; nothing names them).
    pub failed: Vec<String>,
}

/// Delete the files of the blobs a prune released (`PruneReport::released_blobs`),
/// each only if no attachment names it by then: an upload of the same bytes may have
/// come since the prune's transaction.
pub async fn release_blobs(
    store: &Attachments,
    blobs: &LocalBlobStore,
    uris: &[String],
) -> ReleasedBlobs {
    let mut done = ReleasedBlobs::default();
    for uri in uris {
        let named = || async {
            store
                .blob_named(uri)
                .await
                .map_err(|e| toolshed_core::BlobError {
                    message: format!("cannot tell whether an attachment names {uri}: {e}"),
                })
        };
        match blobs.release(uri, named).await {
            Ok(toolshed_providers::Released::Removed) => done.removed += 1,
            Ok(toolshed_providers::Released::Kept) => done.kept += 1,
            Ok(toolshed_providers::Released::Missing) => {}
            Err(e) => done.failed.push(e.message),
        }
    }
    done
}

/// Where an upload belongs.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UploadQuery {
    /// The file's name, e.g. `report.pdf` (its extension helps tell the kind).
    pub filename: String,
    /// The run the file is attached to (one of `run_id`, `session_id` is needed).
    pub run_id: Option<String>,
    /// The session the file is attached to: every run of it may read the file.
    pub session_id: Option<String>,
}

/// An attachment's metadata.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AttachmentView {
    /// Its id: what `read_attachment` takes as `attachment_id`.
    pub id: String,
    /// The run it is attached to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The session it is attached to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The file name as uploaded.
    pub filename: String,
    /// `pdf`, `docx`, `xlsx`, `csv`, `text` or `markdown`.
    pub kind: String,
    /// What offsets count: `chars` or `rows`.
    pub unit: String,
    /// The media type.
    pub media_type: String,
    /// The file's size in bytes.
    pub size_bytes: u64,
    /// Hex SHA-256 of the file.
    pub sha256: String,
    /// The file in the blob store.
    pub blob_uri: String,
    /// How many pages it was parsed into.
    pub page_count: u32,
    /// Its whole length in `unit`.
    pub total_length: u64,
    /// When it was attached (ms since the Unix epoch).
    pub created_at_ms: i64,
}

impl From<AttachmentRecord> for AttachmentView {
    fn from(r: AttachmentRecord) -> Self {
        AttachmentView {
            id: r.id,
            run_id: r.run_id,
            session_id: r.session_id,
            filename: r.filename,
            kind: r.kind,
            unit: r.unit,
            media_type: r.media_type,
            size_bytes: r.size_bytes,
            sha256: r.sha256,
            blob_uri: r.blob_uri,
            page_count: r.page_count,
            total_length: r.total_length,
            created_at_ms: r.created_at_ms,
        }
    }
}

/// Attach a file to a run or a session (needs the deployer role, as running tools
/// does). The body is the file itself, raw (any content type), at most 32 MiB; it is
/// parsed now, once: PDF text per page, docx paragraphs, xlsx and CSV rows, text and
/// Markdown. An encrypted, damaged, oversized or unknown file is refused with 422
/// (`ATTACHMENT_ENCRYPTED`, `ATTACHMENT_CORRUPT`, `ATTACHMENT_LIMIT_EXCEEDED`,
/// `ATTACHMENT_UNSUPPORTED`) or 413 (`PAYLOAD_TOO_LARGE`). Only runs of the
/// caller's tenant, of that run or session, can read it.
#[utoipa::path(post, path = "/api/v1/attachments", tag = "attachments", security(("bearer" = [])),
    params(UploadQuery),
    request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "The file, raw"),
    responses(
        (status = 201, description = "Attached", body = Data<AttachmentView>),
        (status = 400, body = ErrorEnvelope), (status = 401, body = ErrorEnvelope),
        (status = 403, body = ErrorEnvelope),
        (status = 413, description = "The file is larger than 32 MiB", body = ErrorEnvelope),
        (status = 422, description = "A field is wrong, or the file was refused (its code says why)", body = ErrorEnvelope),
    ))]
pub async fn create_attachment(
    State(state): State<AppState>,
    Deployer(claims): Deployer,
    Query(q): Query<UploadQuery>,
    body: RawBody,
) -> Result<(axum::http::StatusCode, Json<Data<AttachmentView>>), ApiError> {
    let limits = Limits::default();
    // The route reads its own body, past the JSON routes' limit, up to the file cap;
    // one byte more is a 413 without reading further.
    let max = usize::try_from(limits.max_file_bytes).unwrap_or(usize::MAX);
    let bytes = axum::body::to_bytes(body, max)
        .await
        .map_err(|_| crate::extract::too_large(max))?;
    let (store, blobs) = state.attachments()?;
    let record = upload(
        &store,
        blobs.as_ref(),
        &limits,
        Upload {
            tenant: claims.tenant.clone(),
            run_id: q.run_id,
            session_id: q.session_id,
            filename: &q.filename,
            uploaded_by: Some(format!("{}|{}", claims.iss, claims.sub)),
        },
        bytes.to_vec(),
    )
    .await?;
    Ok((
        axum::http::StatusCode::CREATED,
        Json(Data {
            data: record.into(),
        }),
    ))
}

/// An attachment's metadata (viewer). Another tenant's attachment is not found.
#[utoipa::path(get, path = "/api/v1/attachments/{id}", tag = "attachments", security(("bearer" = [])),
    params(("id" = String, Path, description = "The attachment id")),
    responses(
        (status = 200, body = Data<AttachmentView>),
        (status = 401, body = ErrorEnvelope),
        (status = 404, body = ErrorEnvelope),
    ))]
pub async fn get_attachment(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<String>,
) -> Result<Json<Data<AttachmentView>>, ApiError> {
    let claims = auth.require(Role::Viewer)?;
    let (store, _) = state.attachments()?;
    let record = store
        .get(claims.tenant.as_deref(), &id)
        .await
        .map_err(|e| match e {
            JournalError::NotFound { .. } => ApiError::not_found(format!(
                "attachment `{id}` not found (attachments of other tenants are not shown)"
            )),
            other => ApiError::from(other),
        })?;
    Ok(Json(Data {
        data: record.into(),
    }))
}

/// The stores an upload needs, opened once by the server.
pub type AttachmentStores = (Arc<Attachments>, Arc<LocalBlobStore>);
