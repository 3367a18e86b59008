//! Client-controlled values cannot forge or split access-log lines: each hostile request
//! (a newline, NUL or ANSI escape in `model`, spaces and `=` in `x-request-id`, a `"` in the
//! path) makes exactly one text line whose fields parse back to the values sent; the JSON
//! format carries them as JSON strings.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A router with the access log in `format` (no engine: every request is answered by the
/// router itself, with the request's values in the entry).
async fn router(format: &str) -> (tempfile::TempDir, kthena_router::Router) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("manifests")).unwrap();
    let cfg = format!(
        "accessLog: {{format: {format}, output: \"{}\"}}\nstandalone:\n  manifests: [manifests]\n  endpoints: []\n",
        dir.path().join("access.log").display()
    );
    let path = dir.path().join("router.yaml");
    std::fs::write(&path, cfg).unwrap();
    let r = start_router_at(&path).await;
    (dir, r)
}

/// One raw HTTP/1.1 request (the target as written, which no URI type would build).
async fn raw_post(addr: SocketAddr, target: &str, request_id: &str, body: &str) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST {target} HTTP/1.1\r\nHost: x\r\nx-request-id: {request_id}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 "),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

/// The values sent: `(path, x-request-id, model)`.
fn hostile() -> Vec<(String, String, String)> {
    let forged =
        "m\n[2026-01-01T00:00:00Z] \"POST /v1/chat/completions HTTP/1.1\" 200 model_name=forged";
    vec![
        ("/v1/chat/completions".into(), "r1".into(), forged.into()),
        (
            "/v1/chat/completions".into(),
            "r2".into(),
            "m\u{0}\u{1b}[31mred\u{1b}[0m\\x41".into(),
        ),
        (
            "/v1/chat/completions".into(),
            "r3 user_id=admin model_name=x".into(),
            "m3".into(),
        ),
        (
            "/v1/chat\"/completions".into(),
            "r4=\"q\"".into(),
            "m4".into(),
        ),
        (
            "/v1/chat/completions".into(),
            "r5".into(),
            "é \u{202e}x=y".into(),
        ),
    ]
}

/// Undoes the log's escaping: every `\xHH` back to its byte.
fn unescape(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && b.get(i + 1) == Some(&b'x') && i + 3 < b.len() {
            out.push(u8::from_str_radix(&v[i + 2..i + 4], 16).unwrap());
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// The request line's path and the `key=value` fields of one text line.
fn parse_text(line: &str) -> (String, HashMap<String, String>) {
    let (_, rest) = line.split_once("] \"").unwrap();
    let (request, rest) = rest.split_once('"').unwrap();
    let path = request.split(' ').nth(1).unwrap().to_owned();
    let mut fields = HashMap::new();
    let mut rest = rest.trim_start_matches(|c: char| c.is_ascii_digit() || c == ' ');
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=').unwrap();
        let (value, next) = if let Some(q) = after.strip_prefix('"') {
            let (v, n) = q.split_once('"').unwrap();
            (v, n)
        } else {
            after.split_once(' ').unwrap_or((after, ""))
        };
        fields.insert(key.to_owned(), unescape(value));
        rest = next.trim_start();
    }
    (unescape(&path), fields)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_values_make_one_text_line_each_that_parses_back() {
    let (dir, r) = router("text").await;
    for (path, id, model) in hostile() {
        let body = serde_json::json!({"model": model, "prompt": "hi"}).to_string();
        raw_post(r.addr, &path, &id, &body).await;
    }
    r.flush_access_log();
    let text = std::fs::read_to_string(dir.path().join("access.log")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), hostile().len(), "{text}");
    for (line, (path, id, model)) in lines.iter().zip(hostile()) {
        assert!(line.bytes().all(|b| (0x20..0x7f).contains(&b)), "{line}");
        let (logged_path, fields) = parse_text(line);
        assert_eq!(logged_path, path, "{line}");
        assert_eq!(fields["request_id"], id, "{line}");
        if path == "/v1/chat/completions" {
            assert_eq!(fields["model_name"], model, "{line}");
            assert!(fields["error"].starts_with("route_not_found:"), "{line}");
        }
        assert!(!fields.contains_key("user_id"), "{line}");
    }
    r.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_values_are_json_strings_in_the_json_format() {
    let (dir, r) = router("json").await;
    for (path, id, model) in hostile() {
        let body = serde_json::json!({"model": model, "prompt": "hi"}).to_string();
        raw_post(r.addr, &path, &id, &body).await;
    }
    r.flush_access_log();
    let text = std::fs::read_to_string(dir.path().join("access.log")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), hostile().len(), "{text}");
    for (line, (path, id, model)) in lines.iter().zip(hostile()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["path"], path.as_str());
        assert_eq!(v["request_id"], id.as_str());
        if path == "/v1/chat/completions" {
            assert_eq!(v["model_name"], model.as_str());
        }
    }
    r.shutdown().await;
}
