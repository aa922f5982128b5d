//! `toolshed attach FILE --run ID | --session ID`: attach a file to a run or a session
//! in the local journal (`--database-url`), parsed once now; `read_attachment` in that
//! run (or any run of that session) reads it by the id printed.
//!
//! The upload is the server's own path ([`toolshed_server::routes::attachments::upload`]):
//! the same checks, parsers, caps and error codes. The file goes to the blob folder
//! beside a SQLite journal (`blobs/`), or `$TOOLSHED_BLOB_DIR`.

use std::path::PathBuf;

use anyhow::anyhow;
use toolshed_attachments::Limits;
use toolshed_journal::Attachments;
use toolshed_providers::LocalBlobStore;
use toolshed_server::routes::attachments::{Upload, UploadError, blob_dir, check_name, upload};

use crate::db::{Db, journal_failure};
use crate::output::{EXIT_BAD_INPUT, EXIT_INTERNAL, Failure, print, print_json};

/// Attach a file to a run or a session.
#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    /// The file: PDF, docx, xlsx, CSV, plain text or Markdown (at most 32 MiB).
    pub file: PathBuf,
    /// The run to attach it to.
    #[arg(long, conflicts_with = "session", required_unless_present = "session")]
    pub run: Option<String>,
    /// The session to attach it to: every run of the session may read it.
    #[arg(long)]
    pub session: Option<String>,
    /// Print the attachment as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Check a `--session` id as an upload checks `session_id` (1 to 255 characters, no
/// control character): exit 2 naming the flag otherwise.
pub fn check_session(session: &str) -> Result<(), Failure> {
    check_name("session_id", session).map_err(|e| match e {
        UploadError::Field(_, why) => Failure::bad_input(anyhow!("--session {why}")),
        other => Failure::bad_input(anyhow!("--session: {other}")),
    })
}

/// The attachments' store and blob folder of the journal at `db`, as `toolshed attach`
/// and `toolshed runs prune` use them.
pub(crate) async fn stores(db: &Db) -> Result<(Attachments, LocalBlobStore), Failure> {
    let store = Attachments::open(db.url()).await.map_err(journal_failure)?;
    let blobs = LocalBlobStore::new(blob_dir(db.url())).map_err(|e| Failure::Error {
        code: EXIT_INTERNAL,
        error: anyhow!("cannot use the blob folder: {}", e.message),
    })?;
    Ok((store, blobs))
}

/// Run `toolshed attach`.
pub async fn run(args: AttachArgs, db: &Db) -> Result<(), Failure> {
    if let Some(session) = &args.session {
        check_session(session)?;
    }
    let limits = Limits::default();
    let size = std::fs::metadata(&args.file)
        .map_err(|e| Failure::bad_input(anyhow!("cannot read {}: {e}", args.file.display())))?
        .len();
    if size > limits.max_file_bytes {
        return Err(Failure::bad_input(anyhow!(
            "{} is {size} bytes, more than the {} an attachment may have; split it or attach a smaller export [ATTACHMENT_TOO_LARGE]",
            args.file.display(),
            limits.max_file_bytes
        )));
    }
    let bytes = std::fs::read(&args.file)
        .map_err(|e| Failure::bad_input(anyhow!("cannot read {}: {e}", args.file.display())))?;
    let filename = args
        .file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "attachment".to_owned());
    let (store, blobs) = stores(db).await?;
    let user = std::env::var("USER").unwrap_or_else(|_| "local".to_owned());
    let record = upload(
        &store,
        &blobs,
        &limits,
        Upload {
            tenant: None,
            run_id: args.run,
            session_id: args.session,
            filename: &filename,
            uploaded_by: Some(format!("local|{user}")),
        },
        bytes,
    )
    .await
    .map_err(|e| match e {
        UploadError::Journal(j) => journal_failure(j),
        UploadError::Blob(_) => Failure::Error {
            code: EXIT_INTERNAL,
            error: anyhow!("{e}"),
        },
        other => Failure::Error {
            code: EXIT_BAD_INPUT,
            error: anyhow!("{}: {other}", args.file.display()),
        },
    })?;
    if args.json {
        print_json(&serde_json::to_value(&record).unwrap_or_default());
    } else {
        print(&format!(
            "{}\t{}\t{} pages\t{}",
            record.id, record.kind, record.page_count, record.filename
        ));
    }
    Ok(())
}
