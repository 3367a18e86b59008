//! Embeds the scheduler in a host with no HTTP: builds it from router-config YAML, schedules
//! plain data, reports back, and prints the ranked decisions.
//!
//! Run with `cargo run -p kthena-sched --example embed`.

#![allow(clippy::print_stdout, reason = "an example that prints its result")]

use kthena_sched::{Candidate, Config, KvEvent, Metrics, PdRole, Request, Scheduler};

const ROUTER_CONFIG: &str = r#"
scheduler:
  pluginConfig:
  - name: least-request
    args: {maxWaitingRequests: 10}
  - name: prefix-cache
    args: {blockSizeToHash: 64, maxBlocksToMatch: 128, maxHashCacheSize: 50000, topKMatches: 5}
  - name: kvcache-aware
    args: {blockSizeToHash: 4}
  plugins:
    Filter:
      enabled: [least-request, load-imbalance]
    Score:
      enabled:
      - {name: least-request, weight: 1}
      - {name: gpu-usage, weight: 1}
      - {name: prefix-cache, weight: 2}
      - {name: kvcache-aware, weight: 2}
"#;

fn endpoint(id: &str, in_flight: u32, usage: f64) -> Candidate {
    Candidate::new(id, "qwen3").with_metrics(Metrics {
        in_flight,
        running_requests: in_flight,
        kv_cache_usage: usage,
        ttft_ms: Some(120.0),
        tpot_ms: Some(15.0),
        ..Metrics::default()
    })
}

fn print(
    title: &str,
    scheduler: &Scheduler,
    req: &Request<'_>,
    cands: &[Candidate],
) -> anyhow::Result<usize> {
    let decision = scheduler.schedule(req, cands)?;
    println!("{title}");
    for (rank, r) in decision.ranked.iter().enumerate() {
        println!("  #{} {:<14} score {:>6.1}", rank + 1, r.id, r.score);
    }
    for (plugin, ratio) in &decision.match_ratios {
        println!("  {plugin} match ratio {ratio:.2}");
    }
    Ok(decision.best().index)
}

fn main() -> anyhow::Result<()> {
    let config = Config::from_router_yaml(ROUTER_CONFIG)?;
    let scheduler = Scheduler::builder(config).seed(42).build()?;

    let endpoints = vec![
        endpoint("10.0.0.1:8000", 4, 0.40),
        endpoint("10.0.0.2:8000", 1, 0.35),
        endpoint("10.0.0.3:8000", 2, 0.10),
    ];
    let system = "You are a helpful assistant. ".repeat(10);
    let prompt = format!("{system}What is the capital of France?");
    let req = Request::new("qwen3").with_prompt(&prompt);

    let best = print("first request:", &scheduler, &req, &endpoints)?;
    // Sending: the owned completion data does not borrow the request, so a host may drop
    // the prompt now and keep only `done` until the response stream ends.
    let done = scheduler.on_scheduled(&req, &endpoints[best]);
    // ... the response stream ends successfully:
    scheduler.on_completed(&done, true);

    let prompt2 = format!("{system}And of Germany?");
    let req2 = Request::new("qwen3").with_prompt(&prompt2);
    print(
        "same system prompt again (prefix-cache affinity):",
        &scheduler,
        &req2,
        &endpoints,
    )?;

    // An engine reports a cached block of 4 tokens through its KV events.
    let index = scheduler
        .kv_index()
        .ok_or_else(|| anyhow::anyhow!("kvcache-aware not enabled"))?;
    index.apply(
        &endpoints[0].id,
        &KvEvent::BlockStored {
            block_hashes: vec![0xfeed],
            parent_block_hash: None,
            token_ids: vec![151_644, 8948, 198, 2610],
            block_size: 4,
        },
    )?;
    let tokens = [151_644, 8948, 198, 2610, 525, 264, 10950, 17847];
    let req3 = Request::new("qwen3")
        .with_prompt("tokenized")
        .with_token_ids(&tokens);
    print(
        "tokenized request (kvcache-aware):",
        &scheduler,
        &req3,
        &endpoints,
    )?;

    let pd = vec![
        endpoint("decode-0", 3, 0.5).with_pd(PdRole::Decode, "group-a"),
        endpoint("decode-1", 0, 0.2).with_pd(PdRole::Decode, "group-b"),
        endpoint("prefill-a", 0, 0.1).with_pd(PdRole::Prefill, "group-a"),
        endpoint("prefill-b", 1, 0.3).with_pd(PdRole::Prefill, "group-b"),
    ];
    println!("prefill/decode pairs:");
    for pair in scheduler.schedule_pd(&req, &pd)?.pairs {
        println!(
            "  decode {:<10} prefill {}",
            pair.decode.id, pair.prefill.id
        );
    }
    Ok(())
}
