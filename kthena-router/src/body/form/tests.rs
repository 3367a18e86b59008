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
    // Verbatim: the engine reads the same text.
    assert_eq!(model_field(body, "XyZ").await.unwrap(), " whisper-1 ");
}

/// Two `model` parts: refused, held or streamed (the router would route by the first, an
/// engine may serve the last).
#[tokio::test]
async fn a_second_model_part_is_refused() {
    let two = form(&[("model", "a"), ("file", "x"), ("model", "b")]);
    let e = model_field(two.clone(), "XyZ").await.unwrap_err();
    assert_eq!(e.status(), 400);
    assert!(
        e.to_string().contains("more than one `model` form field"),
        "{e}"
    );
    // The streamed form: the prefix ends inside the file, the second part comes later.
    let cut = two.windows(4).position(|w| w == b"file").unwrap();
    let mut watch = FormWatch::new(two.slice(..cut), "XyZ");
    let waker = futures_util::task::noop_waker();
    let mut cx = std::task::Context::from_waker(&waker);
    watch.read(Some(&two.slice(cut..cut + 3)), &mut cx).unwrap();
    let e = watch
        .read(Some(&two.slice(cut + 3..)), &mut cx)
        .unwrap_err();
    assert_eq!(e.status(), 400);
    // One `model` part streamed to its end passes.
    let one = form(&[("model", "a"), ("file", "x"), ("language", "en")]);
    let mut watch = FormWatch::new(one.slice(..10), "XyZ");
    watch.read(Some(&one.slice(10..)), &mut cx).unwrap();
    watch.read(None, &mut cx).unwrap();
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
