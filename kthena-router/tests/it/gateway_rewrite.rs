//! HTTPRoute `URLRewrite` on the real API server: an HTTPRoute serves paths outside `/v1/`
//! (`/llm/...`), its `ReplacePrefixMatch`, `ReplaceFullPath` and `hostname` reach the engine
//! (a recording engine on a pod address of its own), also on a retry; the debug dump lists
//! the Gateway API objects as the API server holds them.

#![allow(clippy::unwrap_used, reason = "tests fail on any error")]

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::Pod;
use kthena_api::gateway::{Gateway, HTTPRoute};
use kthena_api::thirdparty::InferencePool;
use kthena_testenv::TestNamespace;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::cluster_support::{ClusterRouter, apply, model_route, model_server};
use crate::common::{chat, get, post};

/// `(path and query, Host)` of every inference request an engine got.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// An engine at `at` (port 0: chosen by the kernel) that records each POST's path and `Host`
/// and answers a chat completion, or 503 when `fail`; `/metrics` answers an idle vLLM.
async fn recording_engine(at: SocketAddr, fail: bool) -> (SocketAddr, Seen) {
    let listener = TcpListener::bind(at).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let s2 = Arc::clone(&seen);
    // Runs until the test process ends (the tracker only names the tasks).
    let tasks = TaskTracker::new();
    let t2 = tasks.clone();
    tasks.spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let seen = Arc::clone(&s2);
            t2.spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let seen = Arc::clone(&seen);
                    async move { Ok::<_, Infallible>(engine_answer(&req, &seen, fail)) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

fn engine_answer(req: &Request<Incoming>, seen: &Seen, fail: bool) -> Response<Full<Bytes>> {
    if req.method() != http::Method::POST {
        // `/metrics` scrapes and `/v1/models` polls.
        let text: &'static [u8] = if req.uri().path() == "/metrics" {
            b"vllm:num_requests_waiting 0\nvllm:num_requests_running 0\n"
        } else {
            br#"{"object":"list","data":[]}"#
        };
        return Response::new(Full::new(Bytes::from_static(text)));
    }
    let host = req
        .headers()
        .get(http::header::HOST)
        .map(|h| h.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let pq = req.uri().path_and_query().unwrap().as_str().to_owned();
    seen.lock().unwrap().push((pq, host));
    let body = json!({"id": "c", "object": "chat.completion", "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}});
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    if fail {
        *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    }
    r
}

/// Pod `name` labelled `app=<app>` on no simulated node, made Running and Ready at `addr`
/// (its status written here, as a kubelet would).
async fn manual_pod(ns: &TestNamespace, name: &str, app: &str, addr: SocketAddr) {
    let pods: Api<Pod> = ns.api();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"nodeName": format!("manual-{}", ns.name()), "containers": [{
            "name": "engine", "image": "vllm/vllm-openai",
            "ports": [{"containerPort": addr.port()}]}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let status = json!({"status": {"phase": "Running", "podIP": addr.ip().to_string(),
        "podIPs": [{"ip": addr.ip().to_string()}],
        "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// A loopback address of this test's own (`127.44.x.y`, from the process id and `n`).
fn own_ip(n: u8) -> IpAddr {
    let pid = std::process::id();
    IpAddr::from([127, 44, (pid % 250) as u8 + 1, n])
}

/// The HTTPRoute `llm` of the `default` Gateway to InferencePool `rec`: `/llm` prefix
/// replaced by `/` with host `engine.internal`, Exact `/chat` replaced by the full path
/// `/v1/chat/completions`, `/gen` prefix replaced by `/v1`.
fn llm_route(ns: &str) -> Value {
    let pool =
        json!([{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "rec"}]);
    let rw = |path: Value, host: Option<&str>| {
        let mut f = json!({"type": "URLRewrite", "urlRewrite": {"path": path}});
        if let Some(h) = host {
            f["urlRewrite"]["hostname"] = json!(h);
        }
        f
    };
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": "llm", "namespace": ns},
        "spec": {
            "parentRefs": [{"name": "default", "namespace": ns}],
            "rules": [
                {"matches": [{"path": {"type": "PathPrefix", "value": "/llm"}}],
                 "filters": [rw(json!({"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}), Some("engine.internal"))],
                 "backendRefs": pool},
                {"matches": [{"path": {"type": "Exact", "value": "/chat"}}],
                 "filters": [rw(json!({"type": "ReplaceFullPath", "replaceFullPath": "/v1/chat/completions"}), None)],
                 "backendRefs": pool},
                {"matches": [{"path": {"type": "PathPrefix", "value": "/gen"}}],
                 "filters": [rw(json!({"type": "ReplacePrefixMatch", "replacePrefixMatch": "/v1"}), None)],
                 "backendRefs": pool},
            ],
        },
    })
}

/// `(status, body)` of a chat request for `model` to `path`.
async fn ask(r: &ClusterRouter, path: &str, model: &str) -> (u16, Value) {
    let (status, _, body) = post(
        &format!("{}{path}", r.url()),
        chat(model, "hi", false, 4),
        &[],
    )
    .await;
    (
        status.as_u16(),
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

/// Sets up pods `rec-a` (healthy) and `rec-b` (answers 503), both on one port, behind
/// ModelServer `ms-rec` (model `model`) and InferencePool `rec`, the route [`llm_route`],
/// and a router in Gateway API mode with the inference extension.
async fn setup(ns: &TestNamespace, model: &str) -> (ClusterRouter, Seen, Seen) {
    let n = ns.name();
    let (a, seen_a) = recording_engine(SocketAddr::new(own_ip(2), 0), false).await;
    let (b, seen_b) = recording_engine(SocketAddr::new(own_ip(3), a.port()), true).await;
    manual_pod(ns, "rec-a", "rec", a).await;
    manual_pod(ns, "rec-b", "rec", b).await;
    apply(
        ns,
        &[model_server(n, "ms-rec", model, "rec", a.port())],
        &[],
    )
    .await;
    let pools: Api<InferencePool> = ns.api();
    let pool: InferencePool = serde_json::from_value(json!({
        "apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
        "metadata": {"name": "rec"},
        "spec": {"targetPorts": [{"number": a.port()}], "selector": {"matchLabels": {"app": "rec"}},
                 "endpointPickerRef": {"name": "rec", "port": {"number": 8080}}},
    }))
    .unwrap();
    pools.create(&PostParams::default(), &pool).await.unwrap();
    let routes: Api<HTTPRoute> = ns.api();
    let route: HTTPRoute = serde_json::from_value(llm_route(n)).unwrap();
    routes.create(&PostParams::default(), &route).await.unwrap();
    let extra = format!(
        "metricsScrapeInterval: 100ms\ngatewayApi: {{enabled: true, inferenceExtension: true, namespace: {n}, gatewayNamespaces: [{n}]}}"
    );
    let r = ClusterRouter::start_with(ns, &extra).await;
    r.wait_ready().await;
    (r, seen_a, seen_b)
}

/// The last access-log line.
fn last_log(r: &ClusterRouter) -> Value {
    r.router.flush_access_log();
    let text = std::fs::read_to_string(r.dir.path().join("access.log")).unwrap_or_default();
    text.lines()
        .last()
        .map_or(Value::Null, |l| serde_json::from_str(l).unwrap())
}

/// `POST /llm/v1/chat/completions` reaches the engine as `/v1/chat/completions` with
/// `Host: engine.internal` (also the attempt retried after the other pod's 503), the query
/// kept; `ReplaceFullPath` and a `ReplacePrefixMatch` to `/v1` give `/v1/chat/completions`
/// with the pod's own `Host`; `/llm/v1/embeddings` reaches the engine as `/v1/embeddings`;
/// the access log shows the path the client sent (as Go logs
/// it); a path no HTTPRoute matches outside `/v1/` is 404 `unknown_url`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_rewrites_reach_the_engine() {
    let ns = kthena_testenv::namespace("gw-rewrite").await.unwrap();
    let n = ns.name().to_owned();
    let model = format!("{n}-m");
    let (r, seen_a, seen_b) = setup(&ns, &model).await;
    let a_host = |seen: &Seen| seen.lock().unwrap().clone();

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = ask(&r, "/llm/v1/chat/completions", &model).await;
        if status == 200 {
            assert_eq!(body["choices"][0]["message"]["content"], "ok", "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "{status} {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = last_log(&r);
    assert_eq!(log["path"], "/llm/v1/chat/completions", "{log}");
    assert_eq!(log["http_route"], format!("{n}/llm"), "{log}");
    assert_eq!(log["inference_pool"], format!("{n}/rec"), "{log}");
    // Ties between the two pods take turns: some of these go to the failing pod first and
    // are retried on the healthy one.
    for _ in 0..4 {
        let (status, body) = ask(&r, "/llm/v1/chat/completions?x=1", &model).await;
        assert_eq!(status, 200, "{body}");
    }
    let want = |pq: &str| (pq.to_owned(), "engine.internal".to_owned());
    let got_a = a_host(&seen_a);
    let got_b = a_host(&seen_b);
    assert!(!got_b.is_empty(), "the failing pod was never tried");
    assert_eq!(got_a[0], want("/v1/chat/completions"));
    for seen in got_a[1..].iter().chain(&got_b) {
        assert!(
            *seen == want("/v1/chat/completions?x=1") || *seen == want("/v1/chat/completions"),
            "{seen:?}"
        );
    }
    assert_eq!(got_a.len(), 5, "{got_a:?}");

    // No hostname rewrite: the engine sees its own address as Host.
    seen_a.lock().unwrap().clear();
    seen_b.lock().unwrap().clear();
    for path in ["/chat", "/gen/chat/completions"] {
        let (status, body) = ask(&r, path, &model).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let a_addr = r
        .router
        .snapshot()
        .endpoints
        .iter()
        .find(|e| e.name == "rec-a" && e.namespace == n)
        .map(|e| e.address.clone())
        .unwrap();
    let got = a_host(&seen_a);
    assert_eq!(
        got,
        [
            ("/v1/chat/completions".to_owned(), a_addr.clone()),
            ("/v1/chat/completions".to_owned(), a_addr)
        ]
    );

    // Any OpenAI path goes through the rewrite: embeddings.
    seen_a.lock().unwrap().clear();
    let body = json!({"model": model, "input": "hello"}).to_string();
    let (status, _, text) = post(&format!("{}/llm/v1/embeddings", r.url()), body, &[]).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&text));
    assert_eq!(
        a_host(&seen_a),
        [("/v1/embeddings".to_owned(), "engine.internal".to_owned())]
    );

    // Outside `/v1/`, a path no HTTPRoute matches is still unknown.
    let (status, body) = ask(&r, "/other/v1/chat/completions", &model).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "unknown_url", "{body}");
    // A matched path whose rewrite is not an inference path is unknown too.
    let (status, body) = ask(&r, "/llm/v2/chat", &model).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "unknown_url", "{body}");

    // A ModelRoute for the model takes the request (as in Go), and the path still goes
    // upstream rewritten: the body was read as a request to it.
    apply(&ns, &[], &[model_route(&n, "mr", &model, "ms-rec")]).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        seen_a.lock().unwrap().clear();
        seen_b.lock().unwrap().clear();
        let (status, body) = ask(&r, "/gen/chat/completions", &model).await;
        let log = last_log(&r);
        if status == 200 && log["model_route"] == format!("{n}/mr") {
            break;
        }
        assert!(Instant::now() < deadline, "{status} {body} {log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let paths: Vec<String> = a_host(&seen_a)
        .into_iter()
        .chain(a_host(&seen_b))
        .map(|(p, _)| p)
        .collect();
    assert!(!paths.is_empty());
    assert!(
        paths.iter().all(|p| p == "/v1/chat/completions"),
        "{paths:?}"
    );
    r.router.shutdown().await;
}

/// `GET <debug>/debug/config_dump/<path>` as JSON.
async fn dump(r: &ClusterRouter, path: &str) -> (u16, Value) {
    let (status, text) = get(&format!(
        "http://{}/debug/config_dump/{path}",
        r.router.debug_addr
    ))
    .await;
    (status.as_u16(), serde_json::from_str(&text).unwrap())
}

/// `{"name", "namespace", "spec", "status"}` of an object as the API server holds it.
fn as_go<T: serde::Serialize>(name: &str, ns: &str, spec: &T, status: &Value) -> Value {
    json!({"name": name, "namespace": ns, "spec": serde_json::to_value(spec).unwrap(), "status": status})
}

/// The objects of namespace `n` as the dump should show them, read from the API server;
/// `None` until the router has created the `default` Gateway and written its status and
/// the HTTPRoute's.
async fn api_view(ns: &TestNamespace) -> Option<[(&'static str, Value); 3]> {
    let n = ns.name();
    let st = |s: Option<Value>| s.unwrap_or_else(|| json!({}));
    let gw = ns.api::<Gateway>().get_opt("default").await.unwrap()?;
    let hr = ns.api::<HTTPRoute>().get("llm").await.unwrap();
    let ip = ns.api::<InferencePool>().get("rec").await.unwrap();
    let gw_status = st(gw.status.map(|s| serde_json::to_value(s).unwrap()));
    let hr_status = st(hr.status.map(|s| serde_json::to_value(s).unwrap()));
    let ip_status = st(ip.status.map(|s| serde_json::to_value(s).unwrap()));
    if gw_status == json!({}) || hr_status == json!({}) {
        return None;
    }
    Some([
        ("gateways", as_go("default", n, &gw.spec, &gw_status)),
        ("httproutes", as_go("llm", n, &hr.spec, &hr_status)),
        ("inferencepools", as_go("rec", n, &ip.spec, &ip_status)),
    ])
}

/// Whether the dump lists exactly `want` for namespace `n` (other tests' objects are
/// listed too: the router watches every namespace) and answers each by name.
async fn dump_shows(r: &ClusterRouter, n: &str, want: &[(&'static str, Value); 3]) -> bool {
    let mut same = true;
    for (plural, one) in want {
        let (status, list) = dump(r, plural).await;
        assert_eq!(status, 200);
        let ours: Vec<&Value> = list[*plural]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|o| o["namespace"] == n)
            .collect();
        same &= ours == [one];
        let name = one["name"].as_str().unwrap();
        let (status, got) = dump(r, &format!("namespaces/{n}/{plural}/{name}")).await;
        same &= status == 200 && got == *one;
    }
    same
}

/// The debug dump lists the served Gateway, its HTTPRoute and the InferencePool with the
/// spec and status the API server holds, and one of each by name (404 for a missing one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_debug_dump_lists_gateway_api_objects() {
    let ns = kthena_testenv::namespace("gw-dump").await.unwrap();
    let n = ns.name().to_owned();
    let (r, _, _) = setup(&ns, &format!("{n}-m")).await;
    // The router writes statuses: wait until its view and the API server's agree.
    let deadline = Instant::now() + Duration::from_secs(10);
    let want = loop {
        let want = api_view(&ns).await;
        if let Some(w) = want.as_ref()
            && dump_shows(&r, &n, w).await
        {
            break want.unwrap();
        }
        if Instant::now() >= deadline {
            let mut seen = Vec::new();
            for plural in ["gateways", "httproutes", "inferencepools"] {
                seen.push((plural, dump(&r, plural).await.1));
            }
            panic!("the dump never matched the API server: {want:?}; dump: {seen:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let hr = &want[1].1;
    let rule = &hr["spec"]["rules"][0];
    assert_eq!(
        rule["filters"][0]["urlRewrite"]["hostname"], "engine.internal",
        "{hr}"
    );
    assert_eq!(
        hr["status"]["parents"][0]["controllerName"], "volcano.sh/kthena-router",
        "{hr}"
    );
    for (plural, kind) in [
        ("gateways", "Gateway"),
        ("httproutes", "HTTPRoute"),
        ("inferencepools", "InferencePool"),
    ] {
        let (status, body) = dump(&r, &format!("namespaces/{n}/{plural}/missing")).await;
        assert_eq!(
            (status, body),
            (404, json!({"error": format!("{kind} not found")}))
        );
    }
    r.router.shutdown().await;
}
