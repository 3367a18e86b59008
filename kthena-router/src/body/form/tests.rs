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

#[tokio::test]
async fn a_prefix_answers_once_the_model_part_is_complete() {
    let body = form(&[("model", "whisper-1"), ("file", "RIFF....")]);
    let end_of_model = body
        .windows(7)
        .position(|w| w == b"\r\n--XyZ")
        .expect("boundary after model");
    // Cut inside the model's value and before its closing boundary: read more.
    for cut in [3, 40, end_of_model - 2, end_of_model] {
        assert_eq!(
            model_in_prefix(body.slice(..cut), "XyZ").await.unwrap(),
            None,
            "{cut}"
        );
    }
    // Once the closing boundary is in, the file's bytes are not needed.
    let got = model_in_prefix(body.slice(..end_of_model + 7), "XyZ")
        .await
        .unwrap();
    assert_eq!(got.as_deref(), Some("whisper-1"));
    // A whole form without a model, or a blank one, is refused at once.
    let e = model_in_prefix(form(&[("file", "x")]), "XyZ")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "missing_model");
    // Bytes before a first boundary are a preamble: whether it is a form shows later.
    let e = model_in_prefix(Bytes::from_static(b"not multipart at all\r\n"), "XyZ").await;
    assert!(matches!(e, Ok(None)), "{e:?}");
}
