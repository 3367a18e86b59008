//! A real peer router in front of kthena-sim: `vllm-router` 0.1.17 (PyPI, installed by
//! `scripts/services.sh`) with its `kv_aware` policy, which renders every prompt on an engine
//! (`/v1/completions/render`, `/v1/chat/completions/render`) and subscribes to the engines'
//! KV events. Before kthena-sim served the render endpoints, vllm-router could not route
//! with this policy; this checks that it renders through ours and that every request reaches
//! an engine.
#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use std::net::TcpListener;
use std::process::Stdio;
use std::time::Duration;

use common::{metrics, post_json, send};
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

async fn engine() -> SimHandle {
    let mut c = Config::default()
        .with_ephemeral_port()
        .with_model(MODEL)
        .with_time_scale(50.0)
        .with_hash_seed("0");
    c.kv_events_port = Some(0);
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

#[tokio::test]
async fn vllm_router_kv_aware_renders_through_kthena_sim() {
    let sims = [engine().await, engine().await];
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
    for s in &sims {
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
