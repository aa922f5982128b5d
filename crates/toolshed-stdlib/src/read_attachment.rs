//! `read_attachment`: one page (or a part of one) of a file attached to the run or its
//! session, parsed once at upload.
//!
//! The tool reads through the run's attachment store (`ctx.attachments()`), which the
//! CLI and the server wire to the journal; it only ever sees attachments of the run's
//! tenant that were attached to this run or to its session: any other id is
//! `ATTACHMENT_NOT_FOUND`, exactly like an id nobody has.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};
use toolshed_core::{
    AttachmentScope, ErrorCode, HandlerFuture, PageRequest, Reply, Tool, ToolContext, ToolError,
    ToolOutput,
};

/// The most units (characters or rows) one ranged read returns.
pub const MAX_READ_LENGTH: u64 = 100_000;

/// What a ranged read returns when no `length` is given: 4,000 characters or rows.
pub const DEFAULT_READ_LENGTH: u64 = 4_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    attachment_id: String,
    #[serde(default)]
    page: Option<u32>,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    length: Option<u64>,
}

/// The `read_attachment` tool.
pub fn read_attachment_tool() -> Tool {
    Tool::builder("read_attachment")
        .description(
            "Read an attached file (PDF, docx, xlsx, CSV, text or Markdown) by its attachment id: \
             one page by number (from 1), or `length` characters (rows for xlsx and CSV) from \
             `offset`. The answer gives the text or rows, the page count, and `next`: where the \
             next read starts (null at the end). Without page or offset, page 1 is read.",
        )
        .input_schema(json!({
            "type": "object",
            "properties": {
                "attachment_id": {
                    "type": "string", "minLength": 1, "maxLength": 200,
                    "description": "The id the upload returned, e.g. `att_…`."
                },
                "page": {
                    "type": "integer", "minimum": 1,
                    "description": "The page to read, from 1. Not with `offset`."
                },
                "offset": {
                    "type": "integer", "minimum": 0,
                    "description": "Where to start, in characters (rows for xlsx and CSV) from the start of the file. Not with `page`."
                },
                "length": {
                    "type": "integer", "minimum": 1, "maximum": MAX_READ_LENGTH,
                    "description": "How much to read from `offset` (default 4000); a read stops at the end of its page."
                }
            },
            "required": ["attachment_id"],
            "additionalProperties": false
        }))
        .output_schema(json!({
            "type": "object",
            "properties": {
                "attachment_id": {"type": "string"},
                "filename": {"type": "string"},
                "kind": {"enum": ["pdf", "docx", "xlsx", "csv", "text", "markdown"]},
                "unit": {"enum": ["chars", "rows"]},
                "page": {"type": "integer", "minimum": 1},
                "page_count": {"type": "integer", "minimum": 1},
                "text": {"type": "string"},
                "rows": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
                "sheet": {"type": "string"},
                "offset": {"type": "integer", "minimum": 0},
                "length": {"type": "integer", "minimum": 0},
                "total_length": {"type": "integer", "minimum": 0},
                "next": {
                    "type": ["object", "null"],
                    "properties": {
                        "page": {"type": "integer", "minimum": 1},
                        "offset": {"type": "integer", "minimum": 0}
                    },
                    "required": ["page", "offset"]
                }
            },
            "required": ["attachment_id", "filename", "kind", "unit", "page", "page_count",
                         "offset", "length", "total_length", "next"]
        }))
        .timeout(std::time::Duration::from_secs(30))
        .raw_handler(Arc::new(|args: Value, ctx: ToolContext| -> HandlerFuture {
            Box::pin(async move { Reply::new(read(args, ctx).await) })
        }))
        .build()
        .unwrap_or_else(|e| unreachable!("read_attachment's spec is fixed and valid: {e}"))
}

async fn read(args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
    let args: Args = serde_json::from_value(args)
        .map_err(|e| ToolError::new(ErrorCode::InvalidArgs, e.to_string()))?;
    let request = match (args.page, args.offset, args.length) {
        (Some(_), Some(_), _) | (Some(_), None, Some(_)) => {
            return Err(ToolError::new(
                ErrorCode::InvalidArgs,
                "give either `page`, or `offset` (with an optional `length`), not both",
            ));
        }
        (Some(page), None, None) => PageRequest::Page(page),
        (None, Some(offset), length) => PageRequest::Range {
            offset,
            length: length.unwrap_or(DEFAULT_READ_LENGTH).min(MAX_READ_LENGTH),
        },
        (None, None, Some(length)) => PageRequest::Range {
            offset: 0,
            length: length.min(MAX_READ_LENGTH),
        },
        (None, None, None) => PageRequest::Page(1),
    };
    let store = ctx.attachments().ok_or_else(|| {
        ToolError::handler(
            "this run has no attachment store: run read_attachment under the toolshed CLI or server, which keep attachments in the journal",
        )
    })?;
    let scope = AttachmentScope::of(&ctx);
    let page = store.read(&scope, &args.attachment_id, request).await?;
    serde_json::to_value(page)
        .map(ToolOutput::Value)
        .map_err(|e| ToolError::handler(format!("encoding the page: {e}")))
}
