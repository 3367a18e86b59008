//! `/metrics` conformance: the reference Python parser (`prometheus_client`, which vLLM itself
//! uses) reads our exposition in both text formats, and every sample we share with the captured
//! vLLM 0.32 output has the same name and label keys.
#![allow(clippy::unwrap_used, reason = "tests")]

use std::collections::BTreeMap;

use kthena_sim::{Config, spawn};
use serde_json::json;

use crate::common;

const PY: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families as prom
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
def labels(text, parser):
    out = {}
    for fam in parser(text):
        for s in fam.samples:
            if s.name.startswith(("vllm:", "sglang:")) and not s.name.endswith("_created"):
                out[s.name] = sorted(k for k in s.labels if k != "le")
    return out
ours = open(sys.argv[1]).read()
vllm = open(sys.argv[2]).read()
print(json.dumps({"ours_om": labels(ours, om), "ours_prom": labels(ours, prom), "vllm": labels(vllm, prom)}))
"#;

#[tokio::test]
async fn reference_parser_reads_our_metrics_like_vllms() {
    let sim = spawn(
        Config::default()
            .with_ephemeral_port()
            .with_model("tiny-qwen3")
            .with_time_scale(10.0),
    )
    .await
    .unwrap();
    let (status, _) = common::post_json(
        &format!("{}/v1/completions", sim.base_url()),
        &json!({"model": "tiny-qwen3", "prompt": "a b c d", "max_tokens": 3}),
    )
    .await;
    assert_eq!(status, 200);
    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join("ours.txt");
    std::fs::write(&ours, common::metrics(&sim.base_url()).await).unwrap();
    let capture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/vllm-0.32-cpu/metrics.txt"
    );
    let out = tokio::process::Command::new("python3")
        .args(["-c", PY, ours.to_str().unwrap(), capture])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: BTreeMap<String, BTreeMap<String, Vec<String>>> =
        serde_json::from_slice(&out.stdout).unwrap();
    let (om, prom, vllm) = (&parsed["ours_om"], &parsed["ours_prom"], &parsed["vllm"]);
    assert_eq!(om, prom, "both text formats must yield the same samples");
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_preemptions_total",
        "vllm:request_success_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_to_first_token_seconds_sum",
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:request_queue_time_seconds_bucket",
        "vllm:iteration_tokens_total_bucket",
    ] {
        assert_eq!(om.get(name), vllm.get(name), "{name}");
        assert!(om.contains_key(name), "{name} missing");
    }
    // cache_config_info carries a subset of vLLM's labels, including the ones routers read.
    let ours_cc = &om["vllm:cache_config_info"];
    for k in ours_cc {
        assert!(vllm["vllm:cache_config_info"].contains(k), "{k}");
    }
    assert!(
        ours_cc.contains(&"block_size".to_owned())
            && ours_cc.contains(&"num_gpu_blocks".to_owned())
    );
    assert_eq!(
        om["vllm:lora_requests_info"],
        [
            "engine",
            "max_lora",
            "model_name",
            "running_lora_adapters",
            "waiting_lora_adapters"
        ]
    );
    sim.kill().await;
}

#[tokio::test]
async fn help_texts_are_vllms() {
    let sim = spawn(
        Config::default()
            .with_ephemeral_port()
            .with_model("tiny-qwen3"),
    )
    .await
    .unwrap();
    let ours = common::metrics(&sim.base_url()).await;
    let vllm = include_str!("../fixtures/vllm-0.32-cpu/metrics.txt");
    let help = |text: &str| -> BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# HELP "))
            .filter_map(|l| l.split_once(' '))
            .map(|(name, help)| (name.to_owned(), help.to_owned()))
            .collect()
    };
    let theirs = help(vllm);
    let mut compared = 0;
    for (name, text) in help(&ours) {
        assert!(!text.ends_with(".."), "{name}: {text}");
        // Counter families are announced without `_total` by the OpenMetrics writer.
        let Some(expected) = theirs
            .get(&name)
            .or_else(|| theirs.get(&format!("{name}_total")))
        else {
            continue;
        };
        // `prometheus-client` always ends a help text with a period; vLLM's cache info has none.
        assert_eq!(
            text.trim_end_matches('.'),
            expected.trim_end_matches('.'),
            "{name}"
        );
        compared += 1;
    }
    assert!(compared >= 10, "only {compared} families compared");
    sim.kill().await;
}
