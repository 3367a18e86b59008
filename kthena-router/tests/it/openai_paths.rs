//! Every OpenAI path with a model: embeddings through the official `openai` Python client,
//! rerank, score and multipart audio uploads through raw HTTP, each routed by its model to
//! its own kthena-sim engines and scheduled like chat.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use http::StatusCode;
use serde_json::{Value, json};

use crate::common::*;

/// Two models, each served by its own two engines (`a-0`, `a-1` for `model-a`; `b-0`, `b-1`
/// for `model-b`), scheduled by prefix cache and load; then `head` (extra router config).
async fn two_models(head: &str) -> (TestRouter, Vec<kthena_sim::SimHandle>) {
    let mut sims = kthena_sim::spawn_many(2, sim_config("model-a"))
        .await
        .unwrap();
    sims.extend(
        kthena_sim::spawn_many(2, sim_config("model-b"))
            .await
            .unwrap(),
    );
    let eps: String = sims
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let app = if i < 2 { "a" } else { "b" };
            endpoint(&format!("{app}-{}", i % 2), s.addr(), app)
        })
        .collect();
    let head = format!(
        "metricsScrapeInterval: 1h
scheduler:
  plugins:
    Score:
      enabled:
      - {{name: prefix-cache, weight: 1}}
      - {{name: least-request, weight: 1}}
{head}"
    );
    let r = TestRouter::start(
        &head,
        &eps,
        &[
            ("sa.yaml", model_server("srv-a", "model-a", "a", "")),
            ("sb.yaml", model_server("srv-b", "model-b", "b", "")),
            ("ra.yaml", simple_route("route-a", "model-a", "srv-a")),
            ("rb.yaml", simple_route("route-b", "model-b", "srv-b")),
        ],
    )
    .await;
    r.wait_ready().await;
    (r, sims)
}

/// `(path, model_name, selected_pod, status_code)` of every access-log line.
fn log_lines(r: &TestRouter) -> Vec<(String, String, String, u64)> {
    r.access_log()
        .iter()
        .map(|l| {
            (
                l["path"].as_str().unwrap_or_default().to_owned(),
                l["model_name"].as_str().unwrap_or_default().to_owned(),
                l["selected_pod"].as_str().unwrap_or_default().to_owned(),
                l["status_code"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_through_the_openai_client_are_routed_by_model_and_prefix() {
    let (r, _sims) = two_models("").await;
    let v = run_python_client("openai_embeddings.py", r.url(), "model-a,model-b").await;
    // The sim's embedding of an input: [chars, words, index, 1].
    assert_eq!(v["one"]["model"], "model-a");
    assert_eq!(v["one"]["vectors"], json!([[11.0, 2.0, 0.0, 1.0]]));
    assert!(v["one"]["prompt_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        v["many"]["vectors"],
        json!([[7.0, 2.0, 0.0, 1.0], [12.0, 3.0, 1.0, 1.0]])
    );
    assert_eq!(v["ids"]["model"], "model-b");
    assert_eq!(
        v["ids"]["vectors"],
        json!([[3.0, 3.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    );
    let same = v["same"].as_array().unwrap();
    assert_eq!(same.len(), 4);
    assert!(
        same.iter().all(|e| e == &json!([1740.0, 270.0, 0.0, 1.0])),
        "{same:?}"
    );
    assert_eq!(v["error"]["status"], 404);
    assert_eq!(v["error"]["code"], "model_not_found");

    let log = log_lines(&r);
    assert_eq!(log.len(), 8, "{log:?}");
    assert!(log.iter().all(|l| l.0 == "/v1/embeddings"));
    // Routed by model: model-a to a-*, model-b to b-*.
    for (i, (_, model, pod, status)) in log[..7].iter().enumerate() {
        assert_eq!(*status, 200, "{i}");
        let want = if i == 2 { "model-b" } else { "model-a" };
        assert_eq!(model, want);
        assert!(pod.starts_with(&want[6..]), "{i}: {pod}");
    }
    // Scheduled by prefix: the same long input goes to the engine that holds it.
    let same_pods: Vec<&str> = log[3..7].iter().map(|l| l.2.as_str()).collect();
    assert!(
        same_pods.iter().all(|p| *p == same_pods[0]),
        "{same_pods:?}"
    );
    r.router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rerank_and_score_are_routed_by_model() {
    let (r, _sims) = two_models("").await;
    let body = json!({"model": "model-b", "query": "red fox", "documents": ["a blue car", "the red fox", "red paint"]});
    let (s, _, b) = post(&format!("{}/v1/rerank", r.url()), body.to_string(), &[]).await;
    assert_eq!(s, StatusCode::OK, "{b:?}");
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["model"], "model-b");
    let ranked: Vec<(u64, f64)> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["index"].as_u64().unwrap(),
                x["relevance_score"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ranked, [(1, 1.0), (2, 0.5), (0, 0.0)]);
    assert_eq!(v["results"][0]["document"]["text"], "the red fox");

    let body = json!({"model": "model-a", "text_1": "red fox", "text_2": ["red", "fox red"]});
    let (s, _, b) = post(&format!("{}/v1/score", r.url()), body.to_string(), &[]).await;
    assert_eq!(s, StatusCode::OK, "{b:?}");
    let v: Value = serde_json::from_slice(&b).unwrap();
    let scores: Vec<f64> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["score"].as_f64().unwrap())
        .collect();
    assert_eq!(scores, [0.5, 1.0]);

    // A body without a model is refused as chat's is; a GET is not allowed; vLLM's paths
    // outside /v1/ are not routed (as in Go Kthena).
    let (s, _, b) = post(&format!("{}/v1/rerank", r.url()), r#"{"query":"q"}"#, &[]).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["error"]["code"], "missing_model");
    let (s, _) = get(&format!("{}/v1/embeddings", r.url())).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
    let (s, _, _) = post(&format!("{}/rerank", r.url()), body.to_string(), &[]).await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    let log = log_lines(&r);
    assert_eq!(
        (log[0].0.as_str(), log[0].1.as_str()),
        ("/v1/rerank", "model-b")
    );
    assert!(log[0].2.starts_with("b-"), "{log:?}");
    assert_eq!(
        (log[1].0.as_str(), log[1].1.as_str()),
        ("/v1/score", "model-a")
    );
    assert!(log[1].2.starts_with("a-"), "{log:?}");
    r.router.shutdown().await;
}

/// A `multipart/form-data` body of the fields `fields` and a `file` part of `audio`.
fn form(fields: &[(&str, &str)], audio: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.extend_from_slice(
            format!(
                "--BOUNDARY\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    out.extend_from_slice(
        b"--BOUNDARY\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n",
    );
    out.extend_from_slice(audio);
    out.extend_from_slice(b"\r\n--BOUNDARY--\r\n");
    out
}

/// `POST` a form made by [`form`] to `url`: (status, body).
async fn post_form(url: &str, body: Vec<u8>) -> (StatusCode, bytes::Bytes) {
    let req = http::Request::post(url)
        .header("content-type", "multipart/form-data; boundary=BOUNDARY")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    let status = resp.status();
    let b = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    (status, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_audio_is_routed_by_its_model_field() {
    let (r, _sims) = two_models("").await;
    let url = format!("{}/v1/audio/transcriptions", r.url());
    let body = form(&[("language", "en"), ("model", "model-b")], &[7u8; 1000]);
    let (s, b) = post_form(&url, body).await;
    assert_eq!(s, StatusCode::OK, "{b:?}");
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v, json!({"text": "1000 bytes of audio"}));

    // The model after a 3 MB file part.
    let body = form(&[], &vec![1u8; 3 << 20]);
    let mut body = body;
    let tail = b"--BOUNDARY\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nmodel-a\r\n--BOUNDARY--\r\n";
    body.truncate(body.len() - b"--BOUNDARY--\r\n".len());
    body.extend_from_slice(tail);
    let (s, b) = post_form(&format!("{}/v1/audio/translations", r.url()), body).await;
    assert_eq!(s, StatusCode::OK, "{b:?}");
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["text"], format!("{} bytes of audio", 3 << 20));

    // No model field: 400 in the OpenAI error shape.
    let (s, b) = post_form(&url, form(&[("language", "en")], b"RIFF")).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["error"]["code"], "missing_model");
    assert_eq!(v["error"]["param"], "model");
    assert_eq!(v["error"]["type"], "invalid_request_error");

    let log = log_lines(&r);
    assert_eq!(log[0].1, "model-b");
    assert!(log[0].2.starts_with("b-"), "{log:?}");
    assert_eq!(
        (log[1].0.as_str(), log[1].1.as_str()),
        ("/v1/audio/translations", "model-a")
    );
    assert!(log[1].2.starts_with("a-"), "{log:?}");
    assert_eq!(log[2].3, 400);
    r.router.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20_mb_upload_goes_through_and_its_bytes_are_given_back() {
    let (r, _sims) = two_models("maxBodyBytes: 33554432").await;
    let url = format!("{}/v1/audio/transcriptions", r.url());
    let body = form(&[("model", "model-a")], &vec![0u8; 20 << 20]);
    let (s, b) = post_form(&url, body).await;
    assert_eq!(s, StatusCode::OK, "{b:?}");
    let v: Value = serde_json::from_slice(&b).unwrap();
    assert_eq!(v["text"], format!("{} bytes of audio", 20 << 20));
    // The prefix read up to the model field was held on the shared budget while the file
    // streamed, and is given back once answered.
    assert_eq!(
        r.metric("kthena_router_buffered_request_body_bytes").await,
        0.0
    );
    r.router.shutdown().await;
}
