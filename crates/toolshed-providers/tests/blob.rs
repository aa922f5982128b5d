//! The local-folder blob store on a real temporary folder.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use toolshed_core::BlobStore;
use toolshed_providers::LocalBlobStore;

// SHA-256 of "hello".
const HELLO_HEX: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

#[tokio::test]
async fn round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalBlobStore::new(dir.path()).unwrap();
    let blob = store.put(b"hello", Some("text/plain")).await.unwrap();
    assert_eq!(blob.uri, format!("blob:sha256:{HELLO_HEX}"));
    assert_eq!(blob.sha256, HELLO_HEX);
    assert_eq!(blob.size, 5);
    assert_eq!(blob.media_type.as_deref(), Some("text/plain"));
    assert!(
        dir.path()
            .join("sha256")
            .join(&HELLO_HEX[..2])
            .join(HELLO_HEX)
            .is_file()
    );
    assert_eq!(store.get(&blob.uri).await.unwrap(), b"hello");

    let empty = store.put(b"", None).await.unwrap();
    assert_eq!(empty.size, 0);
    assert_eq!(store.get(&empty.uri).await.unwrap(), b"");
}

#[tokio::test]
async fn creates_the_folder() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("a").join("b");
    let store = LocalBlobStore::new(&nested).unwrap();
    assert!(nested.is_dir());
    assert_eq!(store.dir(), nested);

    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = LocalBlobStore::new(&file).unwrap_err();
    assert!(err.message.contains("file"), "{}", err.message);
}

#[tokio::test]
async fn same_bytes_same_uri_and_no_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalBlobStore::new(dir.path()).unwrap();
    let first = store.put(b"hello", None).await.unwrap();
    let path = dir
        .path()
        .join("sha256")
        .join(&HELLO_HEX[..2])
        .join(HELLO_HEX);
    // Blobs are written to a temporary file and renamed into place, so a rewrite would
    // put a new file (a new inode) at the path; a hard link keeps the old one visible.
    let link = dir.path().join("first-write");
    std::fs::hard_link(&path, &link).unwrap();
    let second = store.put(b"hello", Some("text/plain")).await.unwrap();
    assert_eq!(first.uri, second.uri);
    let inode = |p: &std::path::Path| {
        let m = std::fs::metadata(p).unwrap();
        (m.dev(), m.ino())
    };
    assert_eq!(inode(&path), inode(&link), "the blob was rewritten");
    assert_eq!(std::fs::metadata(&path).unwrap().nlink(), 2);
    std::fs::remove_file(&link).unwrap();
    let other = store.put(b"hello!", None).await.unwrap();
    assert_ne!(first.uri, other.uri);
    // No temporary files are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[tokio::test]
async fn concurrent_puts_of_the_same_bytes_agree() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(LocalBlobStore::new(dir.path()).unwrap());
    let data = vec![7u8; 256 * 1024];
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        let data = data.clone();
        tasks.push(tokio::spawn(async move {
            store.put(&data, None).await.unwrap().uri
        }));
    }
    let mut uris = Vec::new();
    for t in tasks {
        uris.push(t.await.unwrap());
    }
    uris.dedup();
    assert_eq!(uris.len(), 1);
    assert_eq!(store.get(&uris[0]).await.unwrap(), data);
}

#[tokio::test]
async fn bad_uris_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalBlobStore::new(dir.path()).unwrap();
    store.put(b"hello", None).await.unwrap();
    let bad = [
        "blob:sha256:../../etc/passwd".to_string(),
        format!("blob:sha256:../{}", &HELLO_HEX[3..]),
        format!("blob:sha256:{}", &HELLO_HEX[..63]),
        format!("blob:sha256:{HELLO_HEX}0"),
        format!("blob:sha256:{}", HELLO_HEX.to_uppercase()),
        format!("blob:sha512:{HELLO_HEX}"),
        format!("file:///{HELLO_HEX}"),
        format!("BLOB:SHA256:{HELLO_HEX}"),
        format!(" blob:sha256:{HELLO_HEX}"),
        format!("blob:sha256:{HELLO_HEX}\n"),
        HELLO_HEX.to_string(),
        String::new(),
    ];
    for uri in &bad {
        let err = store.get(uri).await.unwrap_err();
        assert!(
            err.message.contains("invalid blob URI"),
            "{uri:?}: {}",
            err.message
        );
        assert!(
            err.message.contains("64 lowercase hex digits"),
            "{uri:?}: {}",
            err.message
        );
    }
}

#[tokio::test]
async fn missing_blob_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalBlobStore::new(dir.path()).unwrap();
    let uri = format!("blob:sha256:{}", "0".repeat(64));
    let err = store.get(&uri).await.unwrap_err();
    assert!(err.message.contains("not found"), "{}", err.message);
    assert!(err.message.contains(&uri), "{}", err.message);
    let tool_error: toolshed_core::ToolError = err.into();
    assert_eq!(tool_error.code, toolshed_core::ErrorCode::BlobError);
}

#[tokio::test]
async fn damaged_blob_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let store = LocalBlobStore::new(dir.path()).unwrap();
    let blob = store.put(b"hello", None).await.unwrap();
    let path = dir
        .path()
        .join("sha256")
        .join(&HELLO_HEX[..2])
        .join(HELLO_HEX);
    std::fs::write(&path, b"jello").unwrap();
    let err = store.get(&blob.uri).await.unwrap_err();
    assert!(err.message.contains("damaged"), "{}", err.message);
}

/// The blob's file, and every other file in its folder (a release leaves none behind).
fn files_beside(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("sha256").join(&HELLO_HEX[..2]))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_released_blob_is_deleted_unless_something_names_it() {
    use toolshed_providers::Released;
    let dir = tempfile::tempdir().unwrap();
    let store = LocalBlobStore::new(dir.path()).unwrap();
    let uri = store.put(b"hello", None).await.unwrap().uri;

    // Named again when asked: the file is put back, whole.
    let kept = store.release(&uri, || async { Ok(true) }).await.unwrap();
    assert_eq!(kept, Released::Kept);
    assert_eq!(store.get(&uri).await.unwrap(), b"hello");
    assert_eq!(files_beside(dir.path()), [HELLO_HEX]);

    // The question fails: the file is put back and the error returned.
    let failed = store
        .release(&uri, || async {
            Err(toolshed_core::BlobError {
                message: "the database is away".into(),
            })
        })
        .await
        .unwrap_err();
    assert!(failed.message.contains("database is away"), "{failed:?}");
    assert_eq!(store.get(&uri).await.unwrap(), b"hello");

    // Named by nothing: deleted, and nothing is left beside it.
    let removed = store.release(&uri, || async { Ok(false) }).await.unwrap();
    assert_eq!(removed, Released::Removed);
    assert!(store.get(&uri).await.is_err());
    assert!(files_beside(dir.path()).is_empty());
    assert_eq!(
        store.release(&uri, || async { Ok(false) }).await.unwrap(),
        Released::Missing
    );
    // A URI that is not a blob's is refused, never turned into a path.
    assert!(
        store
            .release("blob:sha256:../../etc", || async { Ok(false) })
            .await
            .is_err()
    );
}

/// An upload of the same bytes while the blob is being released: while the question is
/// asked the file is aside, so the uploader's second store (after recording its name
/// for the blob) writes it again; the release then deletes only its own copy aside.
#[tokio::test]
async fn an_upload_during_a_release_keeps_its_blob() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(LocalBlobStore::new(dir.path()).unwrap());
    let uri = store.put(b"hello", None).await.unwrap().uri;
    // The question is answered "not named" (the uploader's record is not made yet),
    // and the uploader's second store runs before the release ends.
    let uploader = Arc::clone(&store);
    let released = store
        .release(&uri, || async move {
            uploader.put(b"hello", None).await.unwrap();
            Ok(false)
        })
        .await
        .unwrap();
    assert_eq!(released, toolshed_providers::Released::Removed);
    assert_eq!(store.get(&uri).await.unwrap(), b"hello");
    assert_eq!(files_beside(dir.path()), [HELLO_HEX]);
}
