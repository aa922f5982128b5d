//! Attachments as a tool reads them: the [`AttachmentReader`] trait a run's context
//! carries (`ctx.attachments()`), what a read asks for ([`PageRequest`]) and answers
//! ([`AttachmentPage`]), and who may read what ([`AttachmentScope`]).
//!
//! Files are parsed once, at upload, into pages; a reader only looks one page up. The
//! edges implement it (the journal's attachment store); the model crate only defines it.

use std::fmt;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::context::ToolContext;
use crate::error::{ErrorCode, ToolError};

/// Who is reading: the run's tenant, run and session. An attachment is readable only by
/// runs of the tenant that uploaded it, and only by the run it was attached to, or by
/// any run of the session it was attached to; any other id reads as not found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachmentScope {
    /// The tenant of the run's principal; `None` for a run without one (which sees only
    /// attachments uploaded without a tenant).
    pub tenant: Option<String>,
    /// The run's id.
    pub run_id: String,
    /// The run's session id.
    pub session_id: String,
}

impl AttachmentScope {
    /// The scope of the run a call belongs to.
    pub fn of(ctx: &ToolContext) -> Self {
        AttachmentScope {
            tenant: ctx.principal().and_then(|p| p.tenant.clone()),
            run_id: ctx.run_id().to_owned(),
            session_id: ctx.session_id().to_owned(),
        }
    }
}

/// Which part of an attachment to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageRequest {
    /// A whole page, from 1.
    Page(u32),
    /// At most `length` units (characters of text, or rows) from `offset` (from 0, over
    /// the whole attachment); a read never crosses the end of the page holding
    /// `offset`.
    Range {
        /// Where to start, in the attachment's unit.
        offset: u64,
        /// The most to return.
        length: u64,
    },
}

/// Where the next read goes on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextPage {
    /// The page that holds what follows.
    pub page: u32,
    /// Its offset in the attachment's unit.
    pub offset: u64,
}

/// What a read returns: one page's text or rows, or the part of it asked for, with the
/// attachment's shape around it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentPage {
    /// The attachment's id.
    pub attachment_id: String,
    /// Its file name as uploaded.
    pub filename: String,
    /// `pdf`, `docx`, `xlsx`, `csv`, `text` or `markdown`.
    pub kind: String,
    /// What offsets and lengths count: `chars` or `rows`.
    pub unit: String,
    /// The page returned, from 1.
    pub page: u32,
    /// How many pages the attachment has.
    pub page_count: u32,
    /// The text (PDF, docx, text, Markdown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The rows (xlsx, CSV).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<Vec<Vec<String>>>,
    /// The sheet the rows come from (xlsx).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sheet: Option<String>,
    /// Where what is returned starts, in the unit, over the whole attachment.
    pub offset: u64,
    /// How much is returned, in the unit.
    pub length: u64,
    /// The attachment's whole length, in the unit.
    pub total_length: u64,
    /// Where the next read starts; `None` at the end.
    pub next: Option<NextPage>,
}

/// Why a read failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AttachmentReadError {
    /// No such attachment for this run: it does not exist, or it belongs to another
    /// tenant, run or session (the two are not told apart).
    #[error(
        "attachment `{id}` not found for this run; attachments are read by the id their upload returned, by runs of the run or session they were attached to"
    )]
    NotFound {
        /// The id asked for.
        id: String,
    },
    /// The page or offset is past the end.
    #[error("{0}")]
    OutOfRange(String),
    /// The store could not be read.
    #[error("the attachment store failed: {0}")]
    Unavailable(String),
}

impl From<AttachmentReadError> for ToolError {
    fn from(e: AttachmentReadError) -> Self {
        let code = match &e {
            AttachmentReadError::NotFound { .. } => ErrorCode::AttachmentNotFound,
            AttachmentReadError::OutOfRange(_) => ErrorCode::InvalidArgs,
            AttachmentReadError::Unavailable(_) => ErrorCode::HandlerError,
        };
        ToolError::new(code, e.to_string())
    }
}

/// Reads parsed attachments, one page at a time, for the runs allowed to see them.
pub trait AttachmentReader: Send + Sync + fmt::Debug {
    /// Read part of attachment `id` as `scope` may see it.
    fn read<'a>(
        &'a self,
        scope: &'a AttachmentScope,
        id: &'a str,
        request: PageRequest,
    ) -> BoxFuture<'a, Result<AttachmentPage, AttachmentReadError>>;
}
