//! Every PromQL expression of every shipped Grafana dashboard (`charts/kthena/dashboards/`)
//! and of Go Kthena's example dashboard (`examples/observability/`, unchanged) returns data
//! from a real Prometheus scraping real `kthena-router` processes and kthena-sim engines under a
//! mixed workload.
//!
//! Grafana's variables are substituted as Grafana would for a 1 s scrape interval with every
//! variable at "All" (see [`substitute`]). With `KTHENA_DASHBOARD_RANGE_OUT=<file>` the test
//! runs its workload for `KTHENA_DASHBOARD_WORKLOAD_SECS` (default 60) and writes the range
//! queries of the overview dashboard's panels to `<file>` (`scripts/dashboard-png.py` plots
//! them).
#![allow(
    clippy::unwrap_used,
    reason = "test helpers fail the test on any error"
)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::dashboards_support::{
    Prometheus, RouterProcess, exposition, round_go_layout, round_kv_events, router_go_layout,
    router_kv_events,
};
use crate::kv_support::qwen3_dir;

/// What `$__rate_interval` is in Grafana with a 1 s scrape interval and a 1 s `$__interval`:
/// `max($__interval + scrape interval, 4 × scrape interval)`.
const RATE_INTERVAL: &str = "4s";

/// How long Prometheus gets, after the workload, until every expression has series.
const SETTLE: Duration = Duration::from_secs(20);

/// One panel target: the dashboard file, the panel title and its expression as written.
struct Target {
    file: String,
    panel: String,
    expr: String,
}

/// One dashboard: its file and JSON.
struct Dashboard {
    file: String,
    json: serde_json::Value,
}

/// The shipped dashboards, then Go Kthena's example dashboard (the copy under
/// `tests/fixtures/go-kthena/`, and any `*.json` of the shared checkout's
/// `kthena-manifests/examples/observability/`).
fn dashboards() -> Vec<Dashboard> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut files = json_files(&root.join("../charts/kthena/dashboards"));
    assert_eq!(files.len(), 4, "shipped dashboards: {files:?}");
    files.extend(json_files(&root.join("tests/fixtures/go-kthena")));
    files.extend(json_files(
        &root.join("../../shared/kthena-manifests/examples/observability"),
    ));
    files
        .into_iter()
        .map(|f| Dashboard {
            json: serde_json::from_str(&std::fs::read_to_string(&f).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", f.display())),
            file: f.display().to_string(),
        })
        .collect()
}

/// The `*.json` files of `dir` (none when it does not exist), sorted.
fn json_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = read
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

/// Every target of every panel (rows' nested panels too), with its dashboard's variables
/// substituted.
fn targets(d: &Dashboard) -> Vec<Target> {
    fn walk(panels: &[serde_json::Value], d: &Dashboard, out: &mut Vec<Target>) {
        for p in panels {
            if let Some(inner) = p["panels"].as_array() {
                walk(inner, d, out);
            }
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    out.push(Target {
                        file: d.file.clone(),
                        panel: p["title"].as_str().unwrap_or_default().to_owned(),
                        expr: substitute(expr, &d.json),
                    });
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(d.json["panels"].as_array().unwrap(), d, &mut out);
    assert!(!out.is_empty(), "{}: no panel targets", d.file);
    out
}

/// Grafana's variables in `expr` replaced as Grafana does for a 1 s scrape interval with every
/// template variable at "All": `$__rate_interval` → [`RATE_INTERVAL`], `$__interval` → `1s`,
/// `$__range` → `5m`; a query or custom variable (`$name`, `${name}`, `${name:regex}`,
/// `[[name]]`) → its `allValue`, or `.*` without one (Grafana's "All" of a multi-value variable
/// is the alternation of every value, which `=~".*"` matches the same series as). Panics if
/// a `$` is left.
fn substitute(expr: &str, dashboard: &serde_json::Value) -> String {
    let mut out = expr
        .replace("${__rate_interval}", RATE_INTERVAL)
        .replace("$__rate_interval", RATE_INTERVAL)
        .replace("${__interval}", "1s")
        .replace("$__interval", "1s")
        .replace("${__range}", "5m")
        .replace("$__range", "5m");
    let vars = dashboard["templating"]["list"].as_array().cloned();
    for v in vars.into_iter().flatten() {
        let name = v["name"].as_str().unwrap();
        let all = v["allValue"].as_str().unwrap_or(".*");
        for form in [
            format!("${{{name}:regex}}"),
            format!("${{{name}}}"),
            format!("[[{name}]]"),
            format!("${name}"),
        ] {
            out = out.replace(&form, all);
        }
    }
    assert!(
        !out.contains('$'),
        "a variable is left in {out:?} (from {expr:?})"
    );
    out
}

/// The metric of each `label_values(metric, label)` variable query, as an expression that has
/// series when the variable has values.
fn variable_queries(d: &Dashboard) -> Vec<Target> {
    let vars = d.json["templating"]["list"].as_array().cloned();
    vars.into_iter()
        .flatten()
        .filter_map(|v| {
            let def = v["definition"].as_str()?;
            let args = def.strip_prefix("label_values(")?.strip_suffix(')')?;
            let (metric, label) = args.rsplit_once(',')?;
            Some(Target {
                file: d.file.clone(),
                panel: format!("variable {}", v["name"].as_str().unwrap_or_default()),
                expr: format!("count by ({}) ({})", label.trim(), metric.trim()),
            })
        })
        .collect()
}

/// The expressions of `all` that return no series now, as `file: panel: expr` lines.
async fn empty(prom: &Prometheus, all: &[Target]) -> Vec<String> {
    let mut out = Vec::new();
    for t in all {
        if prom.query(&t.expr).await.is_empty() {
            out.push(format!("{}: {}: {}", t.file, t.panel, t.expr));
        }
    }
    out
}

/// Routers, engines and Prometheus of the test.
struct Stack {
    _sims: Vec<kthena_sim::SimHandle>,
    go: RouterProcess,
    kv: RouterProcess,
    prom: Prometheus,
}

/// Two engines behind router A (Go's layout), one engine publishing KV events behind router B,
/// and a Prometheus scraping the routers (job `kthena-router`) and engines (job `engines`).
async fn stack() -> Stack {
    let sim_config = |events: bool| {
        let mut c = crate::common::sim_config("engine-model");
        c.tokenizer = Some(qwen3_dir().join("tokenizer.json"));
        if events {
            c.kv_events_port = Some(0);
        }
        c
    };
    let a = kthena_sim::spawn(sim_config(false)).await.unwrap();
    let b = kthena_sim::spawn(sim_config(false)).await.unwrap();
    let c = kthena_sim::spawn(sim_config(true)).await.unwrap();
    let go = router_go_layout(&[a.addr(), b.addr()]).await;
    let kv = router_kv_events(c.addr(), c.kv_events_port().unwrap()).await;
    let prom = Prometheus::start(&[
        ("kthena-router", vec![go.metrics, kv.metrics]),
        ("engines", vec![a.addr(), b.addr(), c.addr()]),
    ])
    .await;
    Stack {
        _sims: vec![a, b, c],
        go,
        kv,
        prom,
    }
}

/// Workload rounds until `secs` passed (at least one round); the number of rounds.
async fn workload(s: &Stack, secs: u64) -> u32 {
    let end = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut round = 0;
    loop {
        tokio::join!(
            round_go_layout(&s.go, round as usize),
            round_kv_events(&s.kv, round as usize)
        );
        round += 1;
        if tokio::time::Instant::now() >= end {
            return round;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The value of `expr` (one series) once Prometheus' last scrape gives `want`, else the last
/// value seen within [`SETTLE`].
async fn settled(prom: &Prometheus, expr: &str, want: f64) -> f64 {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let series = prom.query(expr).await;
        let got = series
            .first()
            .and_then(|s| s["value"][1].as_str()?.parse().ok())
            .unwrap_or(f64::NAN);
        if got == want || tokio::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What Prometheus holds after `rounds` rounds: every request counted once (12 a round on
/// router A: 8 chats, a completion, a 404, a 429 and a held request's 503; 3 on router B),
/// one 404 of model `unknown`, one rate-limited request and one cold-start timeout a round,
/// every chat of router A through the fairness queue.
async fn check_counts(prom: &Prometheus, rounds: u32) {
    let n = f64::from(rounds);
    let cases = [
        ("sum(kthena_router_requests_total)", 15.0 * n),
        (
            r#"sum(kthena_router_requests_total{model="unknown", status_code="404"})"#,
            n,
        ),
        (
            r#"sum(kthena_router_rate_limit_exceeded_total{model="limited", limit_type="input_tokens"})"#,
            n,
        ),
        (
            r#"sum(kthena_router_cold_start_requests_total{model="cold", outcome="timeout"})"#,
            n,
        ),
        (
            r#"sum(kthena_router_requests_total{error_type="successful_request"})"#,
            12.0 * n,
        ),
    ];
    for (expr, want) in cases {
        assert_eq!(settled(prom, expr, want).await, want, "{expr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_expression_returns_series() {
    let boards = dashboards();
    let all: Vec<Target> = boards
        .iter()
        .flat_map(|d| targets(d).into_iter().chain(variable_queries(d)))
        .collect();
    assert!(
        boards.iter().any(|d| d.file.contains("score-plugins")),
        "Go Kthena's dashboard is tested too"
    );
    let s = stack().await;
    let out = std::env::var("KTHENA_DASHBOARD_RANGE_OUT").ok();
    let secs = match &out {
        Some(_) => {
            std::env::var("KTHENA_DASHBOARD_WORKLOAD_SECS").map_or(60, |v| v.parse().unwrap())
        }
        None => 3,
    };
    let start = std::time::SystemTime::now();
    let rounds = workload(&s, secs).await;
    check_counts(&s.prom, rounds).await;
    // Rates need two samples of each series after the workload's first requests.
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut missing = empty(&s.prom, &all).await;
    while !missing.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        missing = empty(&s.prom, &all).await;
    }
    assert!(
        missing.is_empty(),
        "{} of {} expressions return no series:\n{}\n\nrouter A /metrics:\n{}\nrouter B /metrics:\n{}",
        missing.len(),
        all.len(),
        missing.join("\n"),
        exposition(&s.go).await,
        exposition(&s.kv).await
    );
    if let Some(path) = out {
        let overview = boards
            .iter()
            .find(|d| d.file.ends_with("kthena-router-overview.json"))
            .unwrap();
        write_ranges(&s.prom, overview, start, Path::new(&path)).await;
    }
}

/// Writes `{"title", "panels": [{"title", "unit", "series": [{"legend", "values": [[t, v]]}]}]}`
/// for each panel of `d`: its targets' range queries since `start`, one point a second.
async fn write_ranges(prom: &Prometheus, d: &Dashboard, start: std::time::SystemTime, path: &Path) {
    let unix = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            .to_string()
    };
    let (from, to) = (unix(start), unix(std::time::SystemTime::now()));
    let mut panels = Vec::new();
    for p in d.json["panels"].as_array().unwrap() {
        let mut series = Vec::new();
        for t in p["targets"].as_array().into_iter().flatten() {
            let expr = substitute(t["expr"].as_str().unwrap(), &d.json);
            let params = [
                ("query", expr.as_str()),
                ("start", &from),
                ("end", &to),
                ("step", "1"),
            ];
            let data = prom.api("query_range", &params).await;
            for r in data["result"].as_array().into_iter().flatten() {
                series.push(serde_json::json!({
                    "legend": legend(t["legendFormat"].as_str().unwrap_or_default(), &r["metric"]),
                    "values": r["values"],
                }));
            }
        }
        panels.push(serde_json::json!({
            "title": p["title"],
            "unit": p["fieldConfig"]["defaults"]["unit"],
            "series": series,
        }));
    }
    let doc = serde_json::json!({"title": d.json["title"], "panels": panels});
    std::fs::write(path, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
}

/// A legend format (`{{label}}` placeholders) filled from a series' labels.
fn legend(format: &str, metric: &serde_json::Value) -> String {
    let mut out = format.to_owned();
    for (k, v) in metric.as_object().into_iter().flatten() {
        out = out.replace(&format!("{{{{{k}}}}}"), v.as_str().unwrap_or_default());
    }
    out
}
