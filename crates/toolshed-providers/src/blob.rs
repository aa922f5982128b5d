//! A content-addressed blob store in a local folder.
//!
//! Bytes are stored under `dir/sha256/<first 2 hex digits>/<64 hex digits>` and named by
//! the URI `blob:sha256:<64 hex digits>`. Writes go to a temporary file in the same folder
//! that is then renamed into place, so a reader never sees a half-written blob.

use std::fmt;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::future::BoxFuture;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use toolshed_core::{BlobError, BlobRef, BlobStore};

/// The prefix of every URI this store hands out.
pub const URI_PREFIX: &str = "blob:sha256:";

/// Counter making temporary file names unique within the process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Stores blobs as files in a folder, named by their SHA-256.
#[derive(Clone)]
pub struct LocalBlobStore {
    dir: PathBuf,
}

impl fmt::Debug for LocalBlobStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalBlobStore")
            .field("dir", &self.dir)
            .finish()
    }
}

impl LocalBlobStore {
    /// A store in `dir`, which is created (with its parents) when missing.
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, BlobError> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| {
            blob_error(format!(
                "cannot create the blob folder {}: {e}",
                dir.display()
            ))
        })?;
        if !dir.is_dir() {
            return Err(blob_error(format!(
                "the blob folder {} is not a folder",
                dir.display()
            )));
        }
        Ok(LocalBlobStore { dir })
    }

    /// The folder blobs are stored in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file a blob with this hex digest lives in.
    fn path_of(&self, hex: &str) -> PathBuf {
        self.dir.join("sha256").join(&hex[..2]).join(hex)
    }

    async fn store(&self, bytes: &[u8], media_type: Option<&str>) -> Result<BlobRef, BlobError> {
        let hex = hex_digest(bytes);
        let path = self.path_of(&hex);
        let blob = BlobRef {
            uri: format!("{URI_PREFIX}{hex}"),
            size: bytes.len() as u64,
            sha256: hex.clone(),
            media_type: media_type.map(str::to_string),
        };

        // Content-addressed: a file of the right size already holds these bytes.
        match tokio::fs::metadata(&path).await {
            Ok(meta) if meta.is_file() && meta.len() == blob.size => return Ok(blob),
            Ok(_) => {} // damaged: written over below
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => {
                return Err(blob_error(format!(
                    "cannot inspect {}: {e}",
                    path.display()
                )));
            }
        }

        let folder = path.parent().map(Path::to_path_buf).unwrap_or_default();
        tokio::fs::create_dir_all(&folder).await.map_err(|e| {
            blob_error(format!(
                "cannot create the folder {}: {e}",
                folder.display()
            ))
        })?;

        let (temp, mut file) = create_temp(&folder, &hex).await?;
        let written = async {
            file.write_all(bytes).await?;
            file.sync_all().await?;
            drop(file);
            tokio::fs::rename(&temp, &path).await
        }
        .await;
        if let Err(e) = written {
            let _ = tokio::fs::remove_file(&temp).await;
            return Err(blob_error(format!(
                "cannot write blob {} to {}: {e}",
                blob.uri,
                path.display()
            )));
        }
        Ok(blob)
    }

    async fn load(&self, uri: &str) -> Result<Vec<u8>, BlobError> {
        let hex = parse_uri(uri)?;
        let path = self.path_of(hex);
        let bytes = match tokio::fs::read(&path).await {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(blob_error(format!(
                    "blob {uri} not found in {}",
                    self.dir.display()
                )));
            }
            Err(e) => {
                return Err(blob_error(format!(
                    "cannot read blob {uri} from {}: {e}",
                    path.display()
                )));
            }
        };
        if hex_digest(&bytes) != hex {
            return Err(blob_error(format!(
                "blob {uri} in {} is damaged: its content no longer matches its digest",
                path.display()
            )));
        }
        Ok(bytes)
    }
}

/// What [`LocalBlobStore::release`] did with a blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// The file was deleted.
    Removed,
    /// Something names the blob again (an upload of the same bytes): the file stays.
    Kept,
    /// There was no such file.
    Missing,
}

impl LocalBlobStore {
    /// Delete blob `uri`'s file unless `still_named` says something names the blob.
    ///
    /// Safe against an upload of the same bytes at the same moment, which finds the file
    /// in place and names it: the file is first renamed aside (atomically), *then*
    /// `still_named` is asked, and the file is put back if the answer is yes. An
    /// uploader that stores the bytes, records its name for them, and stores the bytes
    /// again afterwards ([`BlobStore::put`] rewrites a missing file) therefore always
    /// ends with the file in place: a record made before the question is seen by it,
    /// and one made after it is followed by that second store.
    pub async fn release<F, Fut>(&self, uri: &str, still_named: F) -> Result<Released, BlobError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<bool, BlobError>>,
    {
        let hex = parse_uri(uri)?;
        let path = self.path_of(hex);
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let aside = path.with_file_name(format!(".release-{hex}-{}-{n}", std::process::id()));
        match tokio::fs::rename(&path, &aside).await {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Released::Missing),
            Err(e) => {
                return Err(blob_error(format!(
                    "cannot move blob {uri} aside in {}: {e}",
                    self.dir.display()
                )));
            }
        }
        let put_back = || async {
            tokio::fs::rename(&aside, &path).await.map_err(|e| {
                blob_error(format!(
                    "cannot put blob {uri} back from {}: {e}",
                    aside.display()
                ))
            })
        };
        match still_named().await {
            Ok(false) => tokio::fs::remove_file(&aside)
                .await
                .map(|()| Released::Removed)
                .map_err(|e| blob_error(format!("cannot delete {}: {e}", aside.display()))),
            Ok(true) => put_back().await.map(|()| Released::Kept),
            Err(e) => {
                put_back().await?;
                Err(e)
            }
        }
    }
}

impl BlobStore for LocalBlobStore {
    fn put<'a>(
        &'a self,
        bytes: &'a [u8],
        media_type: Option<&'a str>,
    ) -> BoxFuture<'a, Result<BlobRef, BlobError>> {
        Box::pin(self.store(bytes, media_type))
    }

    fn get<'a>(&'a self, uri: &'a str) -> BoxFuture<'a, Result<Vec<u8>, BlobError>> {
        Box::pin(self.load(uri))
    }
}

/// Parse `blob:sha256:<64 lowercase hex digits>` and return the digits. Nothing else is
/// accepted, so a URI can never name a path outside the store.
pub fn parse_uri(uri: &str) -> Result<&str, BlobError> {
    let refuse = |why: &str| {
        let shown: String = uri.chars().take(100).collect();
        let ellipsis = if uri.chars().count() > 100 { "…" } else { "" };
        blob_error(format!(
            "invalid blob URI {shown:?}{ellipsis}: {why}; expected {URI_PREFIX} followed by \
             64 lowercase hex digits"
        ))
    };
    let hex = uri
        .strip_prefix(URI_PREFIX)
        .ok_or_else(|| refuse(&format!("it does not start with {URI_PREFIX}")))?;
    if hex.len() != 64 {
        return Err(refuse(&format!(
            "the digest has {} characters, not 64",
            hex.chars().count()
        )));
    }
    if let Some(bad) = hex.chars().find(|c| !matches!(c, '0'..='9' | 'a'..='f')) {
        return Err(refuse(&format!(
            "the digest contains {bad:?}, not a lowercase hex digit"
        )));
    }
    Ok(hex)
}

/// Create a new, uniquely named temporary file in `folder`.
async fn create_temp(folder: &Path, hex: &str) -> Result<(PathBuf, tokio::fs::File), BlobError> {
    let mut last_error = None;
    for _ in 0..16 {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let temp = folder.join(format!(".tmp-{}-{}-{n}", &hex[..16], std::process::id()));
        match tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .await
        {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => last_error = Some(e),
            Err(e) => {
                return Err(blob_error(format!(
                    "cannot create a temporary file in {}: {e}",
                    folder.display()
                )));
            }
        }
    }
    Err(blob_error(format!(
        "cannot create a temporary file in {}: {}",
        folder.display(),
        last_error.map(|e| e.to_string()).unwrap_or_default()
    )))
}

fn hex_digest(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for b in digest {
        use std::fmt::Write;
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

fn blob_error(message: impl Into<String>) -> BlobError {
    BlobError {
        message: message.into(),
    }
}
