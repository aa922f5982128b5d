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
