//! `POST /api/v1/attachments` and `GET /api/v1/attachments/{id}` against a real server:
//! real files (LibreOffice's docx, qpdf's encrypted PDF, a zip bomb), roles, tenancy
//! (another tenant's attachment is not found), every refusal with its code, and the
//! execute route's runs reaching the attachment store through `read_attachment`.
#![allow(clippy::unwrap_used)]

mod common;

use common::TestServer;
use serde_json::json;

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../toolshed-attachments/tests/fixtures")
            .join(name),
    )
    .unwrap()
}

async fn user_of(s: &TestServer, name: &str, role: &str, tenant: &str) -> String {
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/users",
            Some(&s.admin),
            Some(json!({"username": name, "password": "password-123", "role": role, "tenant": tenant})),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    s.login(name, "password-123").await
}

#[tokio::test]
async fn a_file_is_attached_parsed_once_and_seen_only_by_its_tenant() {
    let s = TestServer::start().await;
    let (status, answer) = s
        .raw(
            "POST",
            "/api/v1/attachments?filename=report.docx&session_id=s1",
            Some(&s.deployer),
            Some(fixture("sample.docx")),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let a = &answer["data"];
    assert_eq!(a["kind"], "docx");
    assert_eq!(a["page_count"], 3);
    assert_eq!(a["session_id"], "s1");
    assert!(
        a["blob_uri"].as_str().unwrap().starts_with("blob:sha256:"),
        "{a}"
    );
    let id = a["id"].as_str().unwrap().to_owned();

    let (status, got) = s
        .call(
            "GET",
            &format!("/api/v1/attachments/{id}"),
            Some(&s.viewer),
            None,
        )
        .await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["data"]["id"], id.as_str());

    let other = user_of(&s, "oscar", "admin", "globex").await;
    let (status, got) = s
        .call(
            "GET",
            &format!("/api/v1/attachments/{id}"),
            Some(&other),
            None,
        )
        .await;
    assert_eq!(status, 404, "{got}");
    assert_eq!(got["error"]["code"], "NOT_FOUND");

    // A viewer may not upload; nobody may without a token.
    let (status, got) = s
        .raw(
            "POST",
            "/api/v1/attachments?filename=a.txt&run_id=r1",
            Some(&s.viewer),
            Some(b"hello".to_vec()),
        )
        .await;
    assert_eq!(
        (status, got["error"]["code"].clone()),
        (403, json!("FORBIDDEN"))
    );
    let (status, _) = s
        .raw(
            "POST",
            "/api/v1/attachments?filename=a.txt&run_id=r1",
            None,
            Some(b"x".to_vec()),
        )
        .await;
    assert_eq!(status, 401);
    s.stop().await;
}

#[tokio::test]
async fn refused_files_answer_their_codes_and_store_nothing() {
    let s = TestServer::start().await;
    for (name, bytes, status, code) in [
        (
            "secret.pdf",
            fixture("encrypted.pdf"),
            422,
            "ATTACHMENT_ENCRYPTED",
        ),
        (
            "broken.pdf",
            fixture("corrupt.pdf"),
            422,
            "ATTACHMENT_CORRUPT",
        ),
        (
            "bomb.docx",
            fixture("bomb.docx"),
            422,
            "ATTACHMENT_LIMIT_EXCEEDED",
        ),
        (
            "logo.png",
            b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec(),
            422,
            "ATTACHMENT_UNSUPPORTED",
        ),
        (
            "big.txt",
            vec![b'a'; 32 * 1024 * 1024 + 1],
            413,
            "PAYLOAD_TOO_LARGE",
        ),
    ] {
        let (got, answer) = s
            .raw(
                "POST",
                &format!("/api/v1/attachments?filename={name}&run_id=r1"),
                Some(&s.deployer),
                Some(bytes),
            )
            .await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{name}: {answer}"
        );
    }
    // Where it belongs, and the query itself.
    let (status, answer) = s
        .raw(
            "POST",
            "/api/v1/attachments?filename=a.txt",
            Some(&s.deployer),
            Some(b"x".to_vec()),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("session_id"),
        "{answer}"
    );
    let (status, answer) = s
        .raw(
            "POST",
            "/api/v1/attachments?run_id=r1",
            Some(&s.deployer),
            Some(b"x".to_vec()),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("INVALID_QUERY")),
        "{answer}"
    );
    s.stop().await;
}

#[tokio::test]
async fn an_execute_run_reads_through_the_attachment_store() {
    let s = TestServer::start().await;
    let (status, answer) = s
        .raw(
            "POST",
            "/api/v1/attachments?filename=notes.md&session_id=s1",
            Some(&s.deployer),
            Some(b"# Notes\n".to_vec()),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
    let id = answer["data"]["id"].as_str().unwrap().to_owned();
    // The execute route's run has a session of its own, not `s1`: the attachment is not
    // found for it (not "no attachment store": the runtime is wired to it).
    let (status, answer) = s
        .call(
            "POST",
            "/api/v1/registry/tools/read_attachment/execute",
            Some(&s.deployer),
            Some(json!({"args": {"attachment_id": id}})),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["data"]["error"]["code"], "ATTACHMENT_NOT_FOUND",
        "{answer}"
    );
    s.stop().await;
}
