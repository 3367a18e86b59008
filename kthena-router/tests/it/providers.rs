//! ExternalModelProvider targets through the router, against local HTTPS servers that speak
//! the OpenAI and Anthropic wire formats (self-signed certificates, `insecureSkipVerify`):
//! standalone mode, and cluster mode on the real API server (kthena-testenv).
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::cluster_support;
use crate::common::{TestRouter, post, post_stream};
use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};
use tokio_util::task::TaskTracker;

/// One request the fake provider got.
#[derive(Debug, Clone)]
struct Got {
    path: String,
    headers: HeaderMap,
    body: Value,
    /// The body's length, bytes.
    len: usize,
}

/// An HTTPS server answering like OpenAI (`/v1/chat/completions`, `/v1/responses`) and
/// Anthropic (`/v1/messages`), recording every request.
struct FakeProvider {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<Got>>>,
    tasks: TaskTracker,
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.tasks.close();
    }
}

impl FakeProvider {
    async fn start() -> Self {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let chain = vec![CertificateDer::from(cert.der().to_vec())];
        let key = PrivateKeyDer::try_from(key.serialize_der()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(cfg));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let got: Arc<Mutex<Vec<Got>>> = Arc::default();
        let g = Arc::clone(&got);
        let tasks = TaskTracker::new();
        let t2 = tasks.clone();
        tasks.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, g) = (acceptor.clone(), Arc::clone(&g));
                t2.spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let g = Arc::clone(&g);
                        async move { Ok::<_, Infallible>(answer(req, &g).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        Self { addr, got, tasks }
    }

    fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }
}

async fn answer(req: Request<Incoming>, got: &Mutex<Vec<Got>>) -> Response<Full<Bytes>> {
    let path = req.uri().path_and_query().unwrap().as_str().to_owned();
    let bare = req.uri().path().to_owned();
    let headers = req.headers().clone();
    let raw = req.into_body().collect().await.unwrap().to_bytes();
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    got.lock().unwrap().push(Got {
        path: path.clone(),
        headers,
        body: body.clone(),
        len: raw.len(),
    });
    let stream = body["stream"] == true;
    let (ctype, text) = match (bare.as_str(), stream) {
        (p, false) if p.ends_with("/chat/completions") => ("application/json", json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}}).to_string()),
        (p, true) if p.ends_with("/chat/completions") => {
            let mut t = String::new();
            for w in ["a", "b", "c"] {
                t.push_str(&format!("data: {}\n\n", json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": w}}]})));
            }
            if body["stream_options"]["include_usage"] == true {
                t.push_str("data: {\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3,\"total_tokens\":12}}\n\n");
            }
            t.push_str("data: [DONE]\n\n");
            ("text/event-stream", t)
        }
        (p, _) if p.ends_with("/audio/transcriptions") => (
            "application/json",
            json!({"text": format!("{} bytes of form", raw.len())}).to_string(),
        ),
        (p, _) if p.ends_with("/responses") => ("application/json", json!({
            "id": "resp_1", "object": "response", "status": "completed", "model": body["model"],
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}],
            "usage": {"input_tokens": 7, "output_tokens": 4, "total_tokens": 11}}).to_string()),
        (p, false) if p.ends_with("/messages") => ("application/json", json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 6}}).to_string()),
        (p, true) if p.ends_with("/messages") => ("text/event-stream", [
            ("message_start", json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 10, "output_tokens": 1}}})),
            ("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hello"}})),
            ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            ("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 6}})),
            ("message_stop", json!({"type": "message_stop"})),
        ].iter().map(|(e, d)| format!("event: {e}\ndata: {d}\n\n")).collect()),
        _ => {
            let mut r = Response::new(Full::new(Bytes::from_static(br#"{"error":{"message":"rate limited","type":"rate_limit_error"}}"#)));
            *r.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
            return r;
        }
    };
    let mut r = Response::new(Full::new(Bytes::from(text)));
    r.headers_mut()
        .insert("content-type", ctype.parse().unwrap());
    r
}

fn provider(name: &str, kind: &str, base: &str, extra: &str) -> String {
    format!(
        "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ExternalModelProvider
metadata: {{name: {name}, namespace: default}}
spec:
  providerType: {kind}
  baseURL: {base}
  insecureSkipVerify: true
{extra}"
    )
}

/// Routes `gpt` → OpenAI provider `oa`, `claude` → Anthropic provider `an`, `nokey` → a
/// provider whose Secret does not exist.
async fn router(up: &FakeProvider) -> TestRouter {
    router_with(up, "").await
}

/// [`router`] with `head` before its config.
async fn router_with(up: &FakeProvider, head: &str) -> TestRouter {
    let base = format!("https://{}", up.addr);
    let manifests = [
        (
            "oa.yaml",
            provider(
                "oa",
                "OpenAI",
                &format!("{base}/v1"),
                "  model: gpt-upstream\n  auth: {secretRef: {name: openai, key: api-key}}\n  headers: {X-Static: s1}\n",
            ),
        ),
        (
            "an.yaml",
            provider(
                "an",
                "Anthropic",
                &base,
                "  auth: {secretRef: {name: anthropic, key: api-key}}\n",
            ),
        ),
        (
            "nokey.yaml",
            provider(
                "nokey",
                "OpenAI",
                &base,
                "  auth: {secretRef: {name: missing, key: api-key}}\n",
            ),
        ),
        ("r1.yaml", route("gpt", "oa")),
        ("r2.yaml", route("claude", "an")),
        ("r3.yaml", route("nokey", "nokey")),
        (
            "strict.yaml",
            provider("strict", "OpenAI", &base, "")
                .replace("insecureSkipVerify: true", "insecureSkipVerify: false"),
        ),
        ("r4.yaml", route("strict", "strict")),
        (
            "r5.yaml",
            limited_route("metered", "oa", "{inputTokensPerUnit: 20, unit: minute}"),
        ),
        (
            "r6.yaml",
            limited_route("capped", "oa", "{outputTokensPerUnit: 5, unit: minute}"),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mdir = dir.path().join("manifests");
    std::fs::create_dir_all(&mdir).unwrap();
    for (name, text) in &manifests {
        std::fs::write(mdir.join(name), text).unwrap();
    }
    std::fs::write(dir.path().join("openai-key"), "sk-openai-1\n").unwrap();
    let cfg = format!(
        "{head}accessLog: {{format: json, output: \"{}\"}}\nstandalone:\n  manifests: [manifests]\n  endpoints: []\n  secrets:\n  - {{name: openai, key: api-key, file: openai-key}}\n  - {{name: anthropic, key: api-key, env: KTHENA_TEST_ANTHROPIC_KEY}}\n",
        dir.path().join("access.log").display()
    );
    let path = dir.path().join("router.yaml");
    std::fs::write(&path, cfg).unwrap();
    let ov = kthena_router::Overrides {
        port: Some(0),
        metrics_port: Some(0),
        debug_port: Some(0),
        ..kthena_router::Overrides::default()
    };
    let env: HashMap<String, String> = [(
        "KTHENA_TEST_ANTHROPIC_KEY".to_owned(),
        "sk-ant-2".to_owned(),
    )]
    .into();
    let cfg = kthena_router::load_config(&path, &env, ov).unwrap();
    let router = kthena_router::Router::start(cfg, Some(path), ov)
        .await
        .unwrap();
    TestRouter { dir, router }
}

fn route(model: &str, provider: &str) -> String {
    format!(
        "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {{name: {model}, namespace: default}}
spec:
  modelName: {model}
  rules:
  - targetModels: [{{externalModelProviderName: {provider}}}]
"
    )
}

/// A route of `model` to `provider` with `rateLimit: <limit>`.
fn limited_route(model: &str, provider: &str, limit: &str) -> String {
    format!("{}  rateLimit: {limit}\n", route(model, provider))
}

#[tokio::test]
async fn openai_chat_streaming_and_responses_through_a_provider() {
    let up = FakeProvider::start().await;
    let r = router(&up).await;
    let chat = json!({"model": "gpt", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let hdrs = [
        ("authorization", "Bearer client-token"),
        ("cookie", "c=1"),
        ("x-custom", "no"),
        ("traceparent", "00-abc-def-01"),
    ];
    let (status, _, body) = post(&format!("{}/v1/chat/completions", r.url()), chat, &hdrs).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["usage"]["completion_tokens"], 3);

    let stream =
        json!({"model": "gpt", "messages": [{"role": "user", "content": "hi"}], "stream": true})
            .to_string();
    let resp = post_stream(
        &format!("{}/v1/chat/completions?api-version=1", r.url()),
        stream,
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    let text = String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert!(
        !text.contains("usage"),
        "the injected usage chunk is hidden: {text}"
    );

    let responses = json!({"model": "gpt", "input": "hi"}).to_string();
    let (status, _, _) = post(&format!("{}/v1/responses", r.url()), responses, &[]).await;
    assert_eq!(status, 200);

    let got = up.got();
    let paths: Vec<&str> = got.iter().map(|g| g.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/v1/chat/completions",
            "/v1/chat/completions?api-version=1",
            "/v1/responses"
        ]
    );
    let h = &got[0].headers;
    assert_eq!(h["authorization"], "Bearer sk-openai-1");
    assert_eq!(h["x-static"], "s1");
    assert_eq!(h["traceparent"], "00-abc-def-01");
    assert_eq!(h["content-type"], "application/json");
    assert!(h.get("cookie").is_none() && h.get("x-custom").is_none());
    let mut names: Vec<&str> = h.keys().map(http::HeaderName::as_str).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "authorization",
            "content-length",
            "content-type",
            "host",
            "traceparent",
            "x-request-id",
            "x-static"
        ]
    );
    assert_eq!(got[0].body["model"], "gpt-upstream");
    assert_eq!(
        got[1].body["stream_options"],
        json!({"include_usage": true})
    );
    assert_eq!(got[2].body.get("stream_options"), None);

    let log = r.access_log();
    let tokens: Vec<(u64, &str)> = log
        .iter()
        .map(|e| {
            (
                e["output_tokens"].as_u64().unwrap(),
                e["backend_type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        tokens,
        [
            (3, "external_provider"),
            (3, "external_provider"),
            (4, "external_provider")
        ]
    );
    let series = "kthena_router_tokens_total{model=\"gpt\",path=\"/v1/chat/completions\",token_type=\"output\",model_route=\"default/gpt\",backend_type=\"external_provider\",backend_name=\"default/oa\",upstream_model=\"gpt-upstream\"}";
    assert_eq!(r.metric(series).await, 6.0);
}

#[tokio::test]
async fn anthropic_messages_through_a_provider() {
    let up = FakeProvider::start().await;
    let r = router(&up).await;
    let body = json!({"model": "claude", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]});
    let hdrs = [
        ("anthropic-version", "2023-06-01"),
        ("x-api-key", "client-key"),
    ];
    let (status, _, out) = post(&format!("{}/v1/messages", r.url()), body.to_string(), &hdrs).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&out));
    let mut s = body.clone();
    s["stream"] = json!(true);
    let resp = post_stream(&format!("{}/v1/messages", r.url()), s.to_string(), &hdrs).await;
    let text = String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(text.contains("event: message_stop"), "{text}");
    let got = up.got();
    assert_eq!(got[0].path, "/v1/messages");
    assert_eq!(got[0].headers["x-api-key"], "sk-ant-2");
    assert_eq!(got[0].headers["anthropic-version"], "2023-06-01");
    assert!(got[0].headers.get("authorization").is_none());
    assert_eq!(got[0].body, body, "the body goes through unchanged");
    assert_eq!(got[1].body.get("stream_options"), None);
    let log = r.access_log();
    let out: Vec<u64> = log
        .iter()
        .map(|e| e["output_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(out, [6, 6]);
}

#[tokio::test]
async fn provider_errors_map_to_statuses() {
    let up = FakeProvider::start().await;
    let r = router(&up).await;
    let chat =
        |m: &str| json!({"model": m, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    // A missing Secret: 503, nothing sent.
    let (status, _, body) = post(
        &format!("{}/v1/chat/completions", r.url()),
        chat("nokey"),
        &[],
    )
    .await;
    assert_eq!(status, 503);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "external_provider_not_ready");
    assert_eq!(
        v["error"]["message"],
        "external provider default/nokey is not ready: Secret default/missing key api-key: not found"
    );
    // A path the provider type does not serve: 400.
    let (status, _, body) = post(&format!("{}/v1/messages", r.url()), chat("gpt"), &[]).await;
    assert_eq!(status, 400);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        v["error"]["message"],
        "provider type \"OpenAI\" does not support path \"/v1/messages\""
    );
    assert!(up.got().is_empty());
    // Certificates are verified unless insecureSkipVerify: the self-signed one fails, 502.
    let (status, _, body) = post(
        &format!("{}/v1/chat/completions", r.url()),
        chat("strict"),
        &[],
    )
    .await;
    assert_eq!(status, 502, "{}", String::from_utf8_lossy(&body));
    let v: Value = serde_json::from_slice(&body).unwrap();
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("external provider default/strict request failed: "),
        "{msg}"
    );
    assert!(msg.contains("certificate"), "{msg}");
    assert!(up.got().is_empty());
    // An upstream error answer is passed through.
    let (status, _, body) = post(
        &format!("{}/v1/completions", r.url()),
        json!({"model": "gpt", "prompt": "x"}).to_string(),
        &[],
    )
    .await;
    assert_eq!(status, 429);
    assert!(String::from_utf8_lossy(&body).contains("rate limited"));
    let log = r.access_log();
    assert_eq!(log[0]["error"]["type"], "provider_config");
    assert_eq!(log[2]["error"]["type"], "upstream_transport");
    assert_eq!(log.last().unwrap()["error"]["type"], "upstream_response");
}

/// A ModelRoute's `rateLimit` applies to its provider targets as to ModelServers: input
/// tokens are estimated from the prompt, output tokens charged from the provider's
/// `usage.completion_tokens`; refused requests never reach the provider.
#[tokio::test]
async fn rate_limits_apply_to_provider_routes() {
    let up = FakeProvider::start().await;
    let r = router(&up).await;
    let url = format!("{}/v1/chat/completions", r.url());
    let ask = |model: &str| {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
        post(&url, body.to_string(), &[])
    };
    // 20 input tokens per minute; "hi" renders to 30 characters, 8 tokens: two fit.
    let mut statuses = Vec::new();
    let mut last = None;
    for _ in 0..3 {
        let (status, headers, body) = ask("metered").await;
        statuses.push(status.as_u16());
        last = Some((headers, body));
    }
    assert_eq!(statuses, [200, 200, 429]);
    let (headers, body) = last.take().unwrap();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "rate_limit_exceeded");
    assert_eq!(v["error"]["message"], "input token rate limit exceeded");
    // 4 tokens missing at 20 per minute.
    assert_eq!(headers["retry-after"], "12");

    // 5 output tokens per minute; each request reserves its max_tokens (2) and the provider
    // reports 3 per answer (1 more taken): the second request still finds its 2, the third
    // finds the bucket in debt.
    let ask_capped = || {
        let body = json!({"model": "capped", "max_tokens": 2,
                          "messages": [{"role": "user", "content": "hi"}]});
        post(&url, body.to_string(), &[])
    };
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let (status, headers, body) = ask_capped().await;
        statuses.push(status.as_u16());
        last = Some((headers, body));
    }
    assert_eq!(statuses, [200, 200, 429]);
    let (headers, body) = last.take().unwrap();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["message"], "output token rate limit exceeded");
    // -1 left, 2 needed: 3 tokens at 5 per minute.
    assert_eq!(headers["retry-after"], "36");

    assert_eq!(up.got().len(), 4, "refused requests are not sent");
    let series = "kthena_router_rate_limit_exceeded_total{model=\"metered\",limit_type=\"input_tokens\",path=\"/v1/chat/completions\"}";
    assert_eq!(r.metric(series).await, 1.0);
    let series = "kthena_router_rate_limit_exceeded_total{model=\"capped\",limit_type=\"output_tokens\",path=\"/v1/chat/completions\"}";
    assert_eq!(r.metric(series).await, 1.0);
}

/// The request's `(status, error message)` in cluster mode.
async fn ask_cluster(r: &cluster_support::ClusterRouter, model: &str) -> (u16, String) {
    let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, out) = post(
        &format!("{}/v1/chat/completions", r.url()),
        body.to_string(),
        &[],
    )
    .await;
    let v: Value = serde_json::from_slice(&out).unwrap_or(Value::Null);
    let msg = v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (status.as_u16(), msg)
}

/// Polls until the request's status is `want` (10 s at most); returns the error message.
async fn until_status(r: &cluster_support::ClusterRouter, model: &str, want: u16) -> String {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (status, msg) = ask_cluster(r, model).await;
        if status == want {
            return msg;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still {status} ({msg}), not {want}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// `(type, status, reason, message)` of the provider's conditions once they satisfy
/// `done` (10 s at most), and its `observedGeneration`.
async fn until_conditions(
    api: &kube::Api<kthena_api::ExternalModelProvider>,
    name: &str,
    done: impl Fn(&[(String, String, String, String)]) -> bool,
) -> (Vec<(String, String, String, String)>, Option<i64>) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let p = api.get(name).await.unwrap();
        let st = p.status.unwrap_or_default();
        let got: Vec<_> = st
            .conditions
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                )
            })
            .collect();
        if done(&got) {
            assert_eq!(st.observed_generation, p.metadata.generation);
            return (got, st.observed_generation);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "conditions never settled: {got:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn cond4(t: &str, s: &str, r: &str, m: &str) -> (String, String, String, String) {
    (t.into(), s.into(), r.into(), m.into())
}

/// Cluster mode: the router watches ExternalModelProviders and the labelled credential
/// Secrets. A missing Secret is a 503 naming the label, and the status says
/// `CredentialNotFound`; the Secret labelled later serves without a restart (the upstream
/// sees its value), with `Ready=True`; deleting it returns to 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_mode_watches_providers_and_their_secrets() {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

    let up = FakeProvider::start().await;
    let ns = kthena_testenv::namespace("providers").await.unwrap();
    let n = ns.name().to_owned();
    let model = format!("{n}-gpt");
    let providers: kube::Api<kthena_api::ExternalModelProvider> = ns.api();
    let provider: kthena_api::ExternalModelProvider = serde_json::from_value(json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1", "kind": "ExternalModelProvider",
        "metadata": {"name": "oa"},
        "spec": {"providerType": "OpenAI", "baseURL": format!("https://{}/v1", up.addr),
                 "insecureSkipVerify": true,
                 "auth": {"secretRef": {"name": "openai", "key": "api-key"}}},
    }))
    .unwrap();
    providers
        .create(&PostParams::default(), &provider)
        .await
        .unwrap();
    let routes: kube::Api<kthena_api::ModelRoute> = ns.api();
    let route: kthena_api::ModelRoute = serde_json::from_value(json!({
        "apiVersion": "networking.serving.volcano.sh/v1alpha1", "kind": "ModelRoute",
        "metadata": {"name": "gpt"},
        "spec": {"modelName": model, "rules": [{"targetModels": [{"externalModelProviderName": "oa"}]}]},
    }))
    .unwrap();
    routes.create(&PostParams::default(), &route).await.unwrap();
    let r = cluster_support::ClusterRouter::start(&ns).await;
    r.wait_ready().await;

    let label = "networking.serving.volcano.sh/external-model-provider-credential";
    let msg = until_status(&r, &model, 503).await;
    assert_eq!(
        msg,
        format!(
            "external provider {n}/oa is not ready: Secret {n}/openai key api-key: not found \
             (the router reads only Secrets labelled {label}=true)"
        )
    );
    let missing = format!("Credential Secret is not found or does not have label {label}=true");
    let (got, generation) = until_conditions(&providers, "oa", |c| {
        c.len() == 2 && c[1].2 == "CredentialNotFound"
    })
    .await;
    assert_eq!(
        got,
        [
            cond4(
                "CredentialsResolved",
                "False",
                "CredentialNotFound",
                &missing
            ),
            cond4("Ready", "False", "CredentialNotFound", &missing),
        ]
    );
    assert_eq!(generation, Some(1));
    assert!(up.got().is_empty());

    // The Secret, first without the label (not read), then labelled.
    let secrets: kube::Api<Secret> = ns.api();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "openai"}, "stringData": {"api-key": "sk-cluster-1\n"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    assert_eq!(ask_cluster(&r, &model).await.0, 503);
    let patch = json!({"metadata": {"labels": {label: "true"}}});
    secrets
        .patch("openai", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    until_status(&r, &model, 200).await;
    let got = up.got();
    assert_eq!(got[0].headers["authorization"], "Bearer sk-cluster-1");
    assert_eq!(got[0].path, "/v1/chat/completions");
    let (got, _) = until_conditions(&providers, "oa", |c| c.len() == 2 && c[1].1 == "True").await;
    assert_eq!(
        got,
        [
            cond4(
                "CredentialsResolved",
                "True",
                "CredentialResolved",
                "Credential Secret and key are available"
            ),
            cond4(
                "Ready",
                "True",
                "Ready",
                "External provider configuration is ready"
            ),
        ]
    );
    r.router.flush_access_log();
    let text = std::fs::read_to_string(r.dir.path().join("access.log")).unwrap();
    let log: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(log["backend_type"], "external_provider", "{log}");
    assert_eq!(log["backend_name"], format!("{n}/oa"), "{log}");
    assert_eq!(log["output_tokens"], 3, "{log}");

    // The Secret deleted: 503 again, and the status follows.
    secrets
        .delete("openai", &DeleteParams::default())
        .await
        .unwrap();
    until_status(&r, &model, 503).await;
    until_conditions(&providers, "oa", |c| {
        c.len() == 2 && c[1].2 == "CredentialNotFound"
    })
    .await;
    r.router.shutdown().await;
}

/// An audio upload to an OpenAI provider streams as to an engine: under a 256 KiB body
/// budget, a 2 MiB form reaches the provider whole (its `Content-Type` and boundary kept)
/// while the router holds only the bytes up to the `model` field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audio_upload_streams_to_a_provider() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = FakeProvider::start().await;
    let r = router_with(
        &up,
        "maxBodyBytes: 8388608\nlistener:\n  maxBufferedBodyBytes: 262144\n",
    )
    .await;
    let head = "--B\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ngpt\r\n--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n";
    let end = "\r\n--B--\r\n";
    let audio = vec![7u8; 2 << 20];
    let len = head.len() + audio.len() + end.len();
    let mut s = tokio::net::TcpStream::connect(r.router.addr).await.unwrap();
    let req = format!(
        "POST /v1/audio/transcriptions HTTP/1.1\r\nhost: x\r\ncontent-type: multipart/form-data; boundary=B\r\ncontent-length: {len}\r\nconnection: close\r\n\r\n{head}"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let held = "kthena_router_buffered_request_body_bytes";
    crate::faults_support::wait_metric(&r, held, head.len() as f64).await;
    s.write_all(&audio).await.unwrap();
    s.write_all(end.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(
        text.ends_with(&format!("{{\"text\":\"{len} bytes of form\"}}")),
        "{text}"
    );
    let got = up.got();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].len, len);
    assert_eq!(got[0].path, "/v1/audio/transcriptions");
    assert_eq!(
        got[0].headers["content-type"],
        "multipart/form-data; boundary=B"
    );
    assert_eq!(r.metric(held).await, 0.0);
    r.router.shutdown().await;
}
