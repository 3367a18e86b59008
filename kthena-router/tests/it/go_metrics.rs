//! `/metrics` after traffic with `prefix-cache` and `kvcache-aware` enabled holds every Go Kthena
//! `kthena_router_*` family (`pkg/kthena-router/metrics/metrics.go`) for the features built, under
//! Go's exact names, types, label names and bucket boundaries (so Go's dashboards and alerts work).
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::collections::HashMap;

use crate::kv_support::common::*;
use crate::kv_support::qwen3_dir;
use http::StatusCode;

const DURATION: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
const PLUGIN: &[f64] = &[0.001, 0.005, 0.01, 0.05, 0.1, 0.5];
const RATIO: &[f64] = &[0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0];
const KVCACHE: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];
const DEST: &[&str] = &[
    "model_route",
    "backend_type",
    "backend_name",
    "upstream_model",
];

/// One family of Go's `metrics.go`: sample name, type, label names (without `le`), buckets.
struct Family {
    name: &'static str,
    kind: &'static str,
    labels: Vec<&'static str>,
    buckets: &'static [f64],
}

fn fam(
    name: &'static str,
    kind: &'static str,
    labels: &[&'static str],
    buckets: &'static [f64],
) -> Family {
    Family {
        name,
        kind,
        labels: labels.to_vec(),
        buckets,
    }
}

/// Go's families for the features built (fairness and session-boost queues and prefill/decode
/// durations are not).
fn spec_families() -> Vec<Family> {
    let with_dest =
        |base: &[&'static str]| -> Vec<&'static str> { base.iter().chain(DEST).copied().collect() };
    vec![
        fam(
            "kthena_router_requests_total",
            "counter",
            &with_dest(&["model", "path", "status_code", "error_type"]),
            &[],
        ),
        fam(
            "kthena_router_request_duration_seconds",
            "histogram",
            &with_dest(&["model", "path", "status_code"]),
            DURATION,
        ),
        fam(
            "kthena_router_tokens_total",
            "counter",
            &with_dest(&["model", "path", "token_type"]),
            &[],
        ),
        fam(
            "kthena_router_scheduler_plugin_duration_seconds",
            "histogram",
            &["model", "plugin", "type"],
            PLUGIN,
        ),
        fam("kthena_router_active_requests", "gauge", &[], &[]),
        fam(
            "kthena_router_active_downstream_requests",
            "gauge",
            &["model"],
            &[],
        ),
        fam(
            "kthena_router_active_upstream_requests",
            "gauge",
            &with_dest(&["model_server"]),
            &[],
        ),
        fam(
            "kthena_router_tokenizer_unsupported_engine_total",
            "counter",
            &["model", "engine"],
            &[],
        ),
        fam(
            "kthena_router_prefix_cache_match_ratio",
            "histogram",
            &["model"],
            RATIO,
        ),
        fam(
            "kthena_router_prefix_cache_evictions_total",
            "counter",
            &["model"],
            &[],
        ),
        fam("kthena_router_prefix_cache_entries", "gauge", &[], &[]),
        fam(
            "kthena_router_kvcache_aware_match_ratio",
            "histogram",
            &["model"],
            RATIO,
        ),
        fam(
            "kthena_router_kvcache_aware_redis_duration_seconds",
            "histogram",
            &["model"],
            KVCACHE,
        ),
        fam(
            "kthena_router_kvcache_aware_tokenize_duration_seconds",
            "histogram",
            &["model"],
            KVCACHE,
        ),
        fam(
            "kthena_router_kvcache_aware_errors_total",
            "counter",
            &["model", "stage"],
            &[],
        ),
        fam(
            "kthena_router_rate_limit_exceeded_total",
            "counter",
            &["model", "limit_type", "path"],
            &[],
        ),
    ]
}

/// A parsed sample line: name, labels in order, value.
fn parse_sample(line: &str) -> (String, Vec<(String, String)>, f64) {
    let (head, value) = line.rsplit_once(' ').unwrap();
    let (name, labels) = match head.split_once('{') {
        Some((n, rest)) => {
            let body = rest.strip_suffix('}').unwrap();
            let labels = body
                .split("\",")
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once("=\"").unwrap();
                    (k.to_owned(), v.trim_end_matches('"').to_owned())
                })
                .collect();
            (n.to_owned(), labels)
        }
        None => (head.to_owned(), Vec::new()),
    };
    (name, labels, value.parse().unwrap())
}

/// The Prometheus name of a family's `# TYPE` line (OpenMetrics drops a counter's `_total`).
fn type_name(f: &Family) -> &'static str {
    if f.kind == "counter" {
        f.name.strip_suffix("_total").unwrap()
    } else {
        f.name
    }
}

/// One parsed sample: name, labels in order, value.
type Sample = (String, Vec<(String, String)>, f64);

/// A parsed exposition.
struct Exposition {
    text: String,
    types: HashMap<String, String>,
    samples: Vec<Sample>,
}

impl Exposition {
    fn parse(text: String) -> Self {
        let mut types = HashMap::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (n, t) = rest.split_once(' ').unwrap();
                types.insert(n.to_owned(), t.to_owned());
            } else if !line.starts_with('#') && !line.is_empty() {
                samples.push(parse_sample(line));
            }
        }
        Self {
            text,
            types,
            samples,
        }
    }

    /// Asserts `f`'s type, that it has series, their label names and (histograms) buckets.
    fn check(&self, f: &Family) {
        let text = &self.text;
        assert_eq!(
            self.types.get(type_name(f)).map(String::as_str),
            Some(f.kind),
            "# TYPE of {} in:\n{text}",
            f.name
        );
        let sample_name = if f.kind == "histogram" {
            format!("{}_bucket", f.name)
        } else {
            f.name.to_owned()
        };
        let series: Vec<&Sample> = self.samples.iter().filter(|s| s.0 == sample_name).collect();
        assert!(!series.is_empty(), "no series of {}:\n{text}", f.name);
        let mut want = f.labels.clone();
        want.sort_unstable();
        for (_, labels, _) in &series {
            let mut got: Vec<&str> = labels
                .iter()
                .map(|(k, _)| k.as_str())
                .filter(|k| *k != "le")
                .collect();
            got.sort_unstable();
            assert_eq!(got, want, "label names of {}", f.name);
        }
        if f.kind == "histogram" {
            let not_le = |l: &&(String, String)| l.0 != "le";
            let first: Vec<&(String, String)> = series[0].1.iter().filter(not_le).collect();
            let got: Vec<String> = series
                .iter()
                .filter(|s| s.1.iter().filter(not_le).eq(first.iter().copied()))
                .map(|s| {
                    let le = &s.1.iter().find(|(k, _)| k == "le").unwrap().1;
                    if le == "+Inf" {
                        le.clone()
                    } else {
                        format!("{}", le.parse::<f64>().unwrap())
                    }
                })
                .collect();
            let mut want: Vec<String> = f.buckets.iter().map(|b| format!("{b}")).collect();
            want.push("+Inf".to_owned());
            assert_eq!(got, want, "buckets of {}", f.name);
        }
    }

    /// Sum of the samples `name` whose labels include `want`.
    fn value(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| {
                s.0 == name
                    && want
                        .iter()
                        .all(|(k, v)| s.1.iter().any(|(sk, sv)| sk == k && sv == v))
            })
            .map(|s| s.2)
            .sum()
    }
}

/// A router over `engine-model` (route `public`) and `other-model` (route `untokenized`).
async fn start(sim: &kthena_sim::SimHandle, other: &kthena_sim::SimHandle) -> TestRouter {
    // prefix-cache with a tiny LRU (evictions); kvcache-aware on a Redis index that cannot
    // be reached (lookups timed and counted as errors), Qwen3's tokenizer in process for
    // `engine-model` and no remote tokenization, so nothing tokenizes `other-model`.
    let dir = qwen3_dir();
    let head = format!(
        "metricsScrapeInterval: 100ms
kvCache:
  index: redis
  redis: {{url: \"redis://127.0.0.1:1\", timeout: 200ms}}
  remoteTokenize: false
  tokenizers:
  - {{model: engine-model, tokenizer: \"{}\", tokenizerConfig: \"{}\"}}
scheduler:
  pluginConfig:
  - name: prefix-cache
    args: {{blockSizeToHash: 16, maxBlocksToMatch: 64, maxHashCacheSize: 8, topKMatches: 5}}
  plugins:
    Filter:
      enabled: [least-request]
    Score:
      enabled:
      - {{name: least-request, weight: 1}}
      - {{name: prefix-cache, weight: 1}}
      - {{name: kvcache-aware, weight: 1}}
",
        dir.join("tokenizer.json").display(),
        dir.join("tokenizer_config.json").display()
    );
    let eps = format!(
        "{}{}",
        endpoint("sim-a", sim.addr(), "demo"),
        endpoint("sim-o", other.addr(), "other")
    );
    TestRouter::start(
        &head,
        &eps,
        &[
            ("s.yaml", model_server("srv", "engine-model", "demo", "")),
            ("r.yaml", simple_route("route", "public", "srv")),
            ("s2.yaml", model_server("srv2", "other-model", "other", "")),
            ("r2.yaml", simple_route("route2", "untokenized", "srv2")),
            (
                "r3.yaml",
                format!(
                    "{}  rateLimit: {{inputTokensPerUnit: 1, unit: hour}}\n",
                    simple_route("route3", "limited", "srv2")
                ),
            ),
        ],
    )
    .await
}

/// Six chats with long distinct prompts to `public`, one completion to `untokenized`.
async fn traffic(r: &TestRouter) {
    for i in 0..6 {
        let text = format!("conversation {i}: {}", "a long shared prompt. ".repeat(12));
        let (status, _, body) = post(
            &format!("{}/v1/chat/completions", r.url()),
            chat("public", &text, false, 3),
            &[],
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    }
    // A second ModelServer whose model nothing can tokenize: kvcache-aware counts the
    // unsupported engine and a tokenize error.
    let (status, _, body) = post(
        &format!("{}/v1/completions", r.url()),
        serde_json::json!({"model": "untokenized", "prompt": "hello there", "max_tokens": 2})
            .to_string(),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    // A prompt of 3 tokens against a limit of 1 per hour.
    let (status, _, _) = post(
        &format!("{}/v1/completions", r.url()),
        serde_json::json!({"model": "limited", "prompt": "hello there", "max_tokens": 2})
            .to_string(),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exposition_has_every_go_family_with_go_shapes() {
    let sim = kthena_sim::spawn(sim_config("engine-model")).await.unwrap();
    let other = kthena_sim::spawn(sim_config("other-model")).await.unwrap();
    let r = start(&sim, &other).await;
    r.wait_ready().await;
    traffic(&r).await;
    let url = format!("http://{}/metrics", r.router.metrics_addr);
    let (status, text) = get(&url).await;
    assert_eq!(status, StatusCode::OK);
    // The body is OpenMetrics (`# EOF`, counters typed without `_total`), and says so.
    assert!(text.ends_with("# EOF\n"), "{text}");
    let req = http::Request::get(&url)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    assert_eq!(
        resp.headers()[http::header::CONTENT_TYPE],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let x = Exposition::parse(text);
    for f in spec_families() {
        x.check(&f);
    }

    // Values users alert on after this traffic.
    assert_eq!(
        x.value(
            "kthena_router_kvcache_aware_errors_total",
            &[("model", "public"), ("stage", "redis")]
        ),
        6.0
    );
    assert_eq!(
        x.value(
            "kthena_router_kvcache_aware_tokenize_duration_seconds_count",
            &[("model", "public")]
        ),
        6.0
    );
    assert_eq!(
        x.value(
            "kthena_router_scheduler_plugin_duration_seconds_count",
            &[
                ("model", "public"),
                ("plugin", "least-request"),
                ("type", "filter")
            ]
        ),
        6.0
    );
    for plugin in ["least-request", "prefix-cache", "kvcache-aware"] {
        assert_eq!(
            x.value(
                "kthena_router_scheduler_plugin_duration_seconds_count",
                &[("model", "public"), ("plugin", plugin), ("type", "score")]
            ),
            6.0,
            "{plugin}"
        );
    }
    // Capacity 8 per endpoint: sim-a's LRU is full (every block beyond it was evicted), and
    // sim-o holds the one block of "hello there".
    assert_eq!(x.value("kthena_router_prefix_cache_entries", &[]), 9.0);
    assert!(
        x.value(
            "kthena_router_prefix_cache_evictions_total",
            &[("model", "public")]
        ) > 0.0
    );
    assert_eq!(x.value("kthena_router_active_requests", &[]), 0.0);
    assert_eq!(
        x.value(
            "kthena_router_tokenizer_unsupported_engine_total",
            &[("model", "untokenized"), ("engine", "vLLM")]
        ),
        1.0
    );
    assert_eq!(
        x.value(
            "kthena_router_kvcache_aware_errors_total",
            &[("model", "untokenized"), ("stage", "tokenize")]
        ),
        1.0
    );
}
