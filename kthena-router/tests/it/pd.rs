//! Prefill/decode disaggregation through the router over real sockets: kthena-sim prefill
//! and decode engines (vLLM NIXL style and SGLang bootstrap), each behind a recording tap.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::net::SocketAddr;

use crate::common;
use crate::common::{TestRouter, post, post_stream};
use crate::pd_support::{Tap, raw_kv_params};
use http_body_util::BodyExt;
use kthena_sim::{Config, Faults, Flavor, Role, SimHandle};
use serde_json::{Value, json};

const SCHED: &str = "scheduler:
  plugins:
    Score:
      enabled:
      - {name: least-request, weight: 1}
";

fn sim_cfg(flavor: Flavor, role: Role) -> Config {
    let mut c = common::sim_config("m");
    c.flavor = flavor;
    c.role = role;
    c
}

fn loopback(last: u8, port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, last], port))
}

/// A pdGroup ModelServer over `app: pd` pods (`group`, `role` labels).
fn pd_server(engine: &str, extra: &str) -> String {
    format!(
        "apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {{name: ms, namespace: default}}
spec:
  model: m
  inferenceEngine: {engine}
  workloadSelector:
    matchLabels: {{app: pd}}
    pdGroup: {{groupKey: group, prefillLabels: {{role: prefill}}, decodeLabels: {{role: decode}}}}
  workloadPort: {{port: 8000}}
{extra}"
    )
}

fn pd_endpoint(name: &str, addr: SocketAddr, group: &str, role: &str) -> String {
    format!(
        "  - {{name: {name}, address: \"{addr}\", labels: {{app: pd, group: {group}, role: {role}}}}}\n"
    )
}

async fn start_router(server: String, endpoints: &str) -> TestRouter {
    let route = common::simple_route("r", "m", "ms");
    let r = TestRouter::start(
        SCHED,
        endpoints,
        &[("ms.yaml", server), ("route.yaml", route)],
    )
    .await;
    r.wait_ready().await;
    r
}

/// A sim engine and the tap in front of it.
struct Engine {
    sim: SimHandle,
    tap: Tap,
}

async fn engine(cfg: Config) -> Engine {
    let sim = kthena_sim::spawn(cfg).await.unwrap();
    let tap = Tap::start(loopback(1, 0), sim.addr(), None).await;
    Engine { sim, tap }
}

/// Two groups of a NIXL prefill and decode engine each: `[p1, d1, p2, d2]`.
async fn nixl_groups(prefill_faults: Faults, decode_faults: Faults) -> (TestRouter, Vec<Engine>) {
    let mut engines = Vec::new();
    for role in [Role::Prefill, Role::Decode, Role::Prefill, Role::Decode] {
        let mut c = sim_cfg(Flavor::Vllm, role);
        c.faults = if role == Role::Prefill && engines.is_empty() {
            prefill_faults.clone()
        } else if role == Role::Decode {
            decode_faults.clone()
        } else {
            Faults::default()
        };
        engines.push(engine(c).await);
    }
    let eps: String = [
        ("p1", "g1", "prefill"),
        ("d1", "g1", "decode"),
        ("p2", "g2", "prefill"),
        ("d2", "g2", "decode"),
    ]
    .iter()
    .zip(&engines)
    .map(|((n, g, r), e)| pd_endpoint(n, e.tap.addr, g, r))
    .collect();
    let r = start_router(pd_server("vLLM", "  kvConnector: {type: nixl}\n"), &eps).await;
    (r, engines)
}

fn prompt(i: usize) -> String {
    (0..60)
        .map(|w| format!("request{i} word{w}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn chat_body(i: usize, stream: bool) -> String {
    json!({"model": "m", "messages": [{"role": "user", "content": prompt(i)}],
           "stream": stream, "max_tokens": 5})
    .to_string()
}

fn json_of(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap()
}

#[tokio::test]
async fn nixl_pairs_within_a_group_and_hands_over_kv_transfer_params_verbatim() {
    let (router, engines) = nixl_groups(Faults::default(), Faults::default()).await;
    let url = format!("{}/v1/chat/completions", router.url());
    for i in 0..4 {
        let (status, _, body) = post(&url, chat_body(i, false), &[]).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(json_of(&body)["usage"]["completion_tokens"], 5);
    }
    // A streaming request: SSE through the decode engine, the injected usage chunk hidden.
    let resp = post_stream(&url, chat_body(4, true), &[]).await;
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
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    assert!(
        !text.contains("\"usage\":{"),
        "usage chunk must stay hidden: {text}"
    );

    let mut params = Vec::new();
    let mut groups_used = [0usize; 2];
    for i in 0..5 {
        let needle = format!("request{i} word0 ");
        let find = |e: &Engine| {
            e.tap
                .seen()
                .into_iter()
                .find(|s| String::from_utf8_lossy(&s.body).contains(&needle))
        };
        let pre: Vec<_> = engines
            .iter()
            .enumerate()
            .filter_map(|(k, e)| find(e).map(|s| (k, s)))
            .collect();
        assert_eq!(
            pre.len(),
            2,
            "request {i} reached one prefill and one decode engine"
        );
        let ((pk, p), (dk, d)) = (&pre[0], &pre[1]);
        assert_eq!(
            (pk % 2, dk % 2),
            (0, 1),
            "prefill engine first, then decode"
        );
        assert_eq!(
            pk / 2,
            dk / 2,
            "request {i}: prefill and decode of one group"
        );
        groups_used[pk / 2] += 1;
        // The prefill body: no stream, max_tokens 1, the NIXL handshake.
        let pb = json_of(&p.body);
        assert_eq!(pb.get("stream"), None);
        assert_eq!(pb.get("stream_options"), None);
        assert_eq!(pb["max_tokens"], 1);
        assert_eq!(
            pb["kv_transfer_params"],
            json!({"do_remote_decode": true, "do_remote_prefill": false})
        );
        // The decode body: the client's request plus the prefill's params, byte for byte.
        let answer = p.answer.as_ref().unwrap();
        let sent = raw_kv_params(&d.body);
        assert_eq!(sent, raw_kv_params(answer), "request {i}");
        let kv = json_of(sent.as_bytes());
        assert_eq!(kv["remote_port"], engines[*pk].sim.addr().port());
        assert!(!kv["remote_block_ids"].as_array().unwrap().is_empty());
        let db = json_of(&d.body);
        assert_eq!(db["max_tokens"], 5);
        assert_eq!(db["stream"], i == 4);
        params.push(sent);
    }
    assert!(
        groups_used.iter().all(|&n| n > 0),
        "both groups served: {groups_used:?}"
    );
    // No two requests share a transformed body.
    for a in 0..params.len() {
        for b in a + 1..params.len() {
            assert_ne!(params[a], params[b], "requests {a} and {b}");
        }
    }
    let series = |phase: &str| {
        format!(
            "kthena_router_request_{phase}_duration_seconds_count{{model=\"m\",path=\"/v1/chat/completions\",status_code=\"200\"}}"
        )
    };
    assert_eq!(router.metric(&series("prefill")).await, 5.0);
    assert_eq!(router.metric(&series("decode")).await, 5.0);
    let log = router.access_log();
    assert_eq!(log.len(), 5);
    assert!(
        log.iter()
            .all(|e| e["status_code"] == 200 && e["output_tokens"] == 5),
        "{log:?}"
    );
}

#[tokio::test]
async fn a_failed_prefill_moves_to_the_next_pair() {
    let failing = Faults {
        error_rate: 1.0,
        ..Faults::default()
    };
    let (router, engines) = nixl_groups(failing, Faults::default()).await;
    let url = format!("{}/v1/chat/completions", router.url());
    for i in 0..4 {
        let (status, _, body) = post(&url, chat_body(i, i % 2 == 1), &[]).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
    let counts: Vec<usize> = engines.iter().map(|e| e.tap.seen().len()).collect();
    // p1 always fails, so d1 never decodes; every request ends on group 2.
    assert!(counts[0] >= 1, "{counts:?}");
    assert_eq!(counts[1], 0, "{counts:?}");
    assert_eq!(counts[2..], [4, 4], "{counts:?}");
    let retried = router
        .access_log()
        .iter()
        .filter(|e| e["upstream_attempts"] == 2)
        .count();
    assert_eq!(retried, counts[0]);
    let failed = "kthena_router_request_prefill_duration_seconds_count{model=\"m\",path=\"/v1/chat/completions\",status_code=\"500\"}";
    assert_eq!(router.metric(failed).await, counts[0] as f64);
}

#[tokio::test]
async fn a_decode_failure_after_the_first_byte_ends_the_stream_with_an_error() {
    let drop_early = Faults {
        drop_after_chunks: Some(2),
        ..Faults::default()
    };
    let (router, engines) = nixl_groups(Faults::default(), drop_early).await;
    let url = format!("{}/v1/chat/completions", router.url());
    let resp = post_stream(&url, chat_body(0, true), &[]).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut text = String::new();
    let end = loop {
        match body.frame().await {
            Some(Ok(f)) => {
                text.push_str(&String::from_utf8_lossy(&f.into_data().unwrap_or_default()))
            }
            Some(Err(e)) => break Some(e),
            None => break None,
        }
    };
    assert!(end.is_some(), "the stream must not end cleanly: {text}");
    assert!(text.contains("upstream_stream_error"), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
    // Exactly one decode engine got the request: no retry once bytes reached the client.
    let decodes = engines[1].tap.seen().len() + engines[3].tap.seen().len();
    assert_eq!(decodes, 1);
    let decode_failed = "kthena_router_request_decode_duration_seconds_count{model=\"m\",path=\"/v1/chat/completions\",status_code=\"500\"}";
    assert_eq!(router.metric(decode_failed).await, 1.0);
}

#[tokio::test]
async fn zero_prefill_endpoints_answer_503_with_a_clear_message() {
    let d = engine(sim_cfg(Flavor::Vllm, Role::Decode)).await;
    let eps = pd_endpoint("d1", d.tap.addr, "g1", "decode");
    let route = common::simple_route("r", "m", "ms");
    let router = TestRouter::start(
        &format!("{SCHED}coldStart: {{enabled: false}}\n"),
        &eps,
        &[("ms.yaml", pd_server("vLLM", "")), ("route.yaml", route)],
    )
    .await;
    router.wait_ready().await;
    let (status, _, body) = post(
        &format!("{}/v1/completions", router.url()),
        r#"{"model":"m","prompt":"hi"}"#,
        &[],
    )
    .await;
    assert_eq!(status, 503);
    let v = json_of(&body);
    assert_eq!(v["error"]["code"], "no_prefill_decode_pair");
    assert_eq!(
        v["error"]["message"],
        "prefill/decode disaggregation can't serve model server default/ms: no ready prefill endpoint (pods matching pdGroup.prefillLabels); every request needs one prefill and one decode endpoint of the same group"
    );
    assert!(d.tap.seen().is_empty());
}

/// Without a prefill endpoint a request is held (`coldStart:`); a prefill endpoint added to
/// the config file releases it, and it is served by one prefill and one decode engine.
#[tokio::test]
async fn a_request_is_held_until_the_missing_prefill_endpoint_appears() {
    let d = engine(sim_cfg(Flavor::Vllm, Role::Decode)).await;
    let p = engine(sim_cfg(Flavor::Vllm, Role::Prefill)).await;
    let eps = pd_endpoint("d1", d.tap.addr, "g1", "decode");
    let route = common::simple_route("r", "m", "ms");
    let router = TestRouter::start(
        &format!("{SCHED}coldStart: {{holdTimeout: 30s}}\n"),
        &eps,
        &[("ms.yaml", pd_server("vLLM", "")), ("route.yaml", route)],
    )
    .await;
    router.wait_ready().await;
    let url = format!("{}/v1/completions", router.url());
    let mut held = tokio::task::JoinSet::new();
    held.spawn(async move { post(&url, r#"{"model":"m","prompt":"hi"}"#, &[]).await });
    let gauge = r#"kthena_router_cold_start_held_requests{model="m",model_server="default/ms"}"#;
    crate::faults_support::wait_metric(&router, gauge, 1.0).await;
    assert!(d.tap.seen().is_empty());
    let path = router.dir.path().join("router.yaml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&pd_endpoint("p1", p.tap.addr, "g1", "prefill"));
    let generation = router.router.generation();
    std::fs::write(&path, text).unwrap();
    let (status, _, body) = held.join_next().await.unwrap().unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(router.router.generation() > generation);
    assert_eq!(p.tap.seen().len(), 1);
    assert_eq!(d.tap.seen().len(), 1);
    assert_eq!(router.metric(gauge).await, 0.0);
}

/// An SGLang decode engine on 127.0.0.3:P and a tap for its prefill engine on 127.0.0.2:P:
/// the decode engine reaches the prefill's bootstrap server at `bootstrap_host` and its own
/// port, as in a cluster where every engine listens on the same port.
async fn sglang_pair() -> (Engine, Engine) {
    for _ in 0..10 {
        let mut dc = sim_cfg(Flavor::Sglang, Role::Decode);
        dc.host = loopback(3, 0).ip();
        let dsim = kthena_sim::spawn(dc).await.unwrap();
        let port = dsim.addr().port();
        let psim = kthena_sim::spawn(sim_cfg(Flavor::Sglang, Role::Prefill))
            .await
            .unwrap();
        let dtap = Tap::start(loopback(1, 0), dsim.addr(), None).await;
        if tokio::net::TcpListener::bind(loopback(2, port))
            .await
            .is_err()
        {
            continue;
        }
        // The prefill tap holds each prefill until the decode request has arrived.
        let ptap = Tap::start(loopback(2, port), psim.addr(), Some(&dtap)).await;
        return (
            Engine {
                sim: psim,
                tap: ptap,
            },
            Engine {
                sim: dsim,
                tap: dtap,
            },
        );
    }
    panic!("no port free on both 127.0.0.2 and 127.0.0.3");
}

#[tokio::test]
async fn sglang_sends_prefill_and_decode_at_once_with_one_bootstrap_room() {
    let (p, d) = sglang_pair().await;
    let eps = pd_endpoint("p1", p.tap.addr, "g1", "prefill")
        + &pd_endpoint("d1", d.tap.addr, "g1", "decode");
    let router = start_router(pd_server("SGLang", ""), &eps).await;
    let url = format!("{}/v1/chat/completions", router.url());
    let (status, _, body) = post(&url, chat_body(0, false), &[]).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(json_of(&body)["usage"]["completion_tokens"], 5);
    let resp = post_stream(&url, chat_body(1, true), &[]).await;
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
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");

    let (pre, dec) = (p.tap.seen(), d.tap.seen());
    assert_eq!((pre.len(), dec.len()), (2, 2));
    let mut rooms = Vec::new();
    for (ps, ds) in pre.iter().zip(&dec) {
        // The prefill was held until the decode request arrived: both in flight at once.
        assert_eq!(ps.gate_opened, Some(true));
        let (pb, db) = (json_of(&ps.body), json_of(&ds.body));
        assert!(pb["bootstrap_room"].is_u64());
        assert_eq!(pb["bootstrap_room"], db["bootstrap_room"]);
        assert_eq!(db["bootstrap_host"], "127.0.0.2");
        assert_eq!(pb.get("bootstrap_host"), None);
        assert_eq!(pb["max_tokens"], 1);
        assert_eq!(pb.get("stream"), None);
        rooms.push(pb["bootstrap_room"].as_u64().unwrap());
    }
    assert_ne!(rooms[0], rooms[1], "a fresh room per request");
    assert!(rooms.iter().all(|r| *r < 1 << 63));
}

#[tokio::test]
async fn traffic_policy_timeout_bounds_both_phases() {
    let p = engine(sim_cfg(Flavor::Vllm, Role::Prefill)).await;
    let d = engine(sim_cfg(Flavor::Vllm, Role::Decode)).await;
    let eps = pd_endpoint("p1", p.tap.addr, "g1", "prefill")
        + &pd_endpoint("d1", d.tap.addr, "g1", "decode");
    let policy = "  trafficPolicy: {timeout: 300ms}\n";
    let router = start_router(pd_server("vLLM", policy), &eps).await;
    let url = format!("{}/v1/chat/completions", router.url());
    let slow = Faults {
        first_byte_delay_ms: 3_000,
        ..Faults::default()
    };
    for (slow_one, name) in [(&p, "p1"), (&d, "d1")] {
        slow_one.sim.set_faults(slow.clone());
        let (status, _, body) = post(&url, chat_body(0, false), &[]).await;
        assert_eq!(status, 504, "{}", String::from_utf8_lossy(&body));
        assert_eq!(
            json_of(&body)["error"]["message"],
            format!("upstream {name} did not answer within 300ms")
        );
        slow_one.sim.set_faults(Faults::default());
    }
    // The http connector: plain prefill body, then the client's body to the decode engine.
    let (status, _, _) = post(&url, chat_body(1, false), &[]).await;
    assert_eq!(status, 200);
    let pre = p.tap.seen().last().unwrap().body.clone();
    assert_eq!(json_of(&pre).get("kv_transfer_params"), None);
    assert_eq!(json_of(&pre)["max_tokens"], 1);
}

/// Prefill/decode forwards JSON bodies only: an audio upload (`multipart/form-data`) to a
/// `pdGroup` ModelServer is refused 503 `no_prefill_decode_pair`, and no engine sees it.
#[tokio::test]
async fn a_multipart_upload_is_refused_by_prefill_decode() {
    let (router, engines) = nixl_groups(Faults::default(), Faults::default()).await;
    let form = "--B\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nm\r\n--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF\r\n--B--\r\n";
    let url = format!("{}/v1/audio/transcriptions", router.url());
    let req = http::Request::post(url)
        .header("content-type", "multipart/form-data; boundary=B")
        .body(http_body_util::Full::new(bytes::Bytes::from_static(
            form.as_bytes(),
        )))
        .unwrap();
    let resp = common::client().request(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
    let v = json_of(&body);
    assert_eq!(v["error"]["code"], "no_prefill_decode_pair");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("a multipart/form-data body is not served by prefill/decode"),
        "{v}"
    );
    let counts: Vec<usize> = engines.iter().map(|e| e.tap.seen().len()).collect();
    assert_eq!(counts, [0, 0, 0, 0]);
}
