use super::*;

fn form(parts: &[(&str, &str)]) -> Bytes {
    let mut out = String::new();
    for (name, value) in parts {
        out.push_str(&format!(
            "--XyZ\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
        ));
    }
    out.push_str("--XyZ--\r\n");
    Bytes::from(out)
}

#[tokio::test]
async fn reads_the_model_field_wherever_it_is() {
    let body = form(&[
        ("file", "RIFF...."),
        ("model", " whisper-1 "),
        ("language", "en"),
    ]);
    assert_eq!(model_field(body, "XyZ").await.unwrap(), "whisper-1");
}

#[tokio::test]
async fn a_form_without_a_model_or_malformed_is_a_client_error() {
    let e = model_field(form(&[("file", "x")]), "XyZ")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "missing_model");
    let e = model_field(form(&[("model", "  ")]), "XyZ")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "missing_model");
    let e = model_field(Bytes::from_static(b"--XyZ\r\ngarbage"), "XyZ")
        .await
        .unwrap_err();
    assert_eq!(e.status(), 400);
}

#[test]
fn the_boundary_comes_from_a_multipart_content_type_only() {
    let mut h = HeaderMap::new();
    assert_eq!(boundary(&h), None);
    h.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
    assert_eq!(boundary(&h), None);
    h.insert(
        header::CONTENT_TYPE,
        "multipart/form-data; boundary=abc".parse().unwrap(),
    );
    assert_eq!(boundary(&h).as_deref(), Some("abc"));
}
