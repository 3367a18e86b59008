//! A real peer router in front of kthena-sim: `vllm-router` 0.1.17 (PyPI, installed by
//! `scripts/services.sh`) with its `kv_aware` policy, which renders every prompt on an engine
//! (`/v1/completions/render`, `/v1/chat/completions/render`) and subscribes to the engines'
//! KV events. Before kthena-sim served the render endpoints, vllm-router could not route
//! with this policy; this checks that it renders through ours and that every request reaches
//! an engine.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::net::TcpListener;
use std::process::Stdio;
use std::time::Duration;

use crate::common;
use crate::common::{metrics, post_json, send};
use kthena_sim::{Config, SimHandle, spawn};
use serde_json::json;

const MODEL: &str = "sim-model";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An engine publishing KV events on `topic` (`None`: kthena-sim's default `kv@<host>@<model>`).
async fn engine(topic: Option<&str>) -> SimHandle {
    let mut c = Config::default()
        .with_ephemeral_port()
        .with_model(MODEL)
        .with_time_scale(50.0)
        .with_hash_seed("0");
    c.kv_events_port = Some(0);
    c.kv_events_topic = topic.map(str::to_owned);
    spawn(c).await.unwrap()
}

/// Sum of every `name{...}` sample.
fn sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// Value of the `vllm_router_kv_routing_inputs_total` series with `result`, 0 if absent.
fn routing_inputs(text: &str, result: &str) -> f64 {
    let prefix =
        format!("vllm_router_kv_routing_inputs_total{{transport=\"http\",result=\"{result}\"}}");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// vllm-router with `kv_aware` in front of `sims`, subscribed to their KV events; answers
/// its base URL and Prometheus port once `/health` says 200.
async fn start_router(sims: &[SimHandle]) -> (tokio::process::Child, String, u16) {
    let (port, prom) = (free_port(), free_port());
    let mut cmd = tokio::process::Command::new("vllm-router");
    cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args([
            "--prometheus-port",
            &prom.to_string(),
            "--policy",
            "kv_aware",
        ])
        .args(["--kv-event-block-size", "16", "--kv-event-model", MODEL])
        .arg("--worker-urls")
        .args(sims.iter().map(SimHandle::base_url));
    for s in sims {
        let z = s.kv_events_port().unwrap();
        cmd.arg("--kv-event-source")
            .arg(format!("{}=tcp://127.0.0.1:{z}", s.base_url()));
    }
    let mut router = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("vllm-router (pip install vllm-router==0.1.17; scripts/services.sh does)");
    let base = format!("http://127.0.0.1:{port}");
    let mut ready = false;
    for _ in 0..200 {
        let up = tokio::time::timeout(Duration::from_secs(1), async {
            let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await;
            stream.is_ok()
        })
        .await
        .unwrap_or(false);
        if up && send("GET", &format!("{base}/health"), None).await.0 == 200 {
            ready = true;
            break;
        }
        assert!(router.try_wait().unwrap().is_none(), "vllm-router exited");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "vllm-router not ready");
    (router, base, prom)
}

#[tokio::test]
async fn vllm_router_kv_aware_renders_through_kthena_sim() {
    let sims = [engine(None).await, engine(None).await];
    let (mut router, base, prom) = start_router(&sims).await;

    let system = vec!["abc"; 100].join(" ");
    for i in 0..3 {
        let (status, body) = post_json(
            &format!("{base}/v1/completions"),
            &json!({"model": MODEL, "prompt": format!("{system} q{i}"), "max_tokens": 2}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["usage"]["prompt_tokens"], 101);
    }
    let (status, body) = post_json(
        &format!("{base}/v1/chat/completions"),
        &json!({"model": MODEL, "messages": [{"role": "user", "content": system}], "max_tokens": 2}),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    // Every request reached an engine, and vllm-router's routing input came from our render
    // endpoints (it counts each input by its source; nothing fell back).
    let mut served = 0.0;
    for s in &sims {
        served += sum(&metrics(&s.base_url()).await, "vllm:request_success_total");
    }
    assert_eq!(served, 4.0);
    let text = common::get_text(&format!("http://127.0.0.1:{prom}/metrics")).await;
    assert!(routing_inputs(&text, "render") >= 4.0, "{text}");
    let other: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("vllm_router_kv_routing_inputs_total") && !l.contains("\"render\"")
        })
        .collect();
    assert!(other.is_empty(), "{other:?}");
    router.kill().await.unwrap();
    for s in sims {
        s.kill().await;
    }
}

/// Value of `vllm_router_kv_placement_lookups_total{result="hit"}`, 0 if absent.
fn placement_hits(text: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix("vllm_router_kv_placement_lookups_total{result=\"hit\"}"))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// vllm-router 0.1.17's static `--kv-event-source` takes no topic and applies only messages
/// on vLLM's default empty topic: on kthena-sim's default `kv@<host>@<model>` its index stays
/// empty and every lookup misses (`docs/benchmarks.md`). Engines on the empty topic get their
/// prefix found: some request sharing the first one's 6 full blocks is a placement hit.
#[tokio::test]
async fn vllm_router_kv_aware_finds_prefixes_from_kthena_sim_events() {
    let sims = [engine(Some("")).await, engine(Some("")).await];
    let (mut router, base, prom) = start_router(&sims).await;
    let system = vec!["abc"; 100].join(" ");
    let mut hits = 0.0;
    // The first request's BlockStored event reaches the router asynchronously: the next
    // requests may still miss. 50 requests of 101 tokens take well under a second.
    for i in 0..50 {
        let (status, body) = post_json(
            &format!("{base}/v1/completions"),
            &json!({"model": MODEL, "prompt": format!("{system} q{i}"), "max_tokens": 2}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
        let text = common::get_text(&format!("http://127.0.0.1:{prom}/metrics")).await;
        hits = placement_hits(&text);
        if hits >= 1.0 {
            break;
        }
    }
    assert!(
        hits >= 1.0,
        "no request found its prefix in vllm-router's KV index"
    );
    router.kill().await.unwrap();
    for s in sims {
        s.kill().await;
    }
}
