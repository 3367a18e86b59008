//! The workload generator and the report: exact counts, prefix sharing, determinism,
//! aggregation and the markdown/JSON shapes.

use kthena_bench::report::{self, EngineCounters, PolicyResult, Sample};
use kthena_bench::scenario::Scenario;
use kthena_bench::workload::{Workload, WorkloadSpec, follow_up};
use kthena_sim::Tokenizer;

fn spec() -> WorkloadSpec {
    WorkloadSpec {
        num_groups: 4,
        prompts_per_group: 3,
        system_prompt_len: 64,
        question_len: 16,
        output_len: 8,
        turns: 1,
        seed: 42,
    }
}

#[test]
fn generated_shared_prefix_has_exact_counts_and_sharing() {
    let tok = Tokenizer::fallback();
    let w = Workload::generate(spec(), &tok);
    assert_eq!(w.system_prompts.len(), 4);
    assert_eq!(w.sessions.len(), 12);
    assert_eq!(w.num_requests(), 12);
    for g in 0..4 {
        assert_eq!(w.sessions.iter().filter(|s| s.group == g).count(), 3);
    }
    for sys in &w.system_prompts {
        assert_eq!(tok.encode(sys, false).len(), 64);
    }
    let mut prompts = Vec::new();
    for s in &w.sessions {
        let p = w.first_prompt(s);
        let ids = tok.encode(&p, false);
        assert_eq!(ids.len(), 80, "system + question tokens");
        // The first 64 token ids are the group's system prompt, shared by its requests.
        assert_eq!(ids[..64], tok.encode(&w.system_prompts[s.group], false)[..]);
        prompts.push((s.group, ids));
    }
    for (g1, a) in &prompts {
        for (g2, b) in &prompts {
            let common = a.iter().zip(b).take_while(|(x, y)| x == y).count();
            if std::ptr::eq(a, b) {
                continue;
            }
            if g1 == g2 {
                assert_eq!(common, 64, "same group shares exactly the system prompt");
            } else {
                assert_eq!(common, 0, "different groups share nothing");
            }
        }
    }
    // Shuffled: not in group order.
    let groups: Vec<usize> = w.sessions.iter().map(|s| s.group).collect();
    assert_ne!(groups, vec![0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]);
}

#[test]
fn generation_is_deterministic_per_seed() {
    let tok = Tokenizer::fallback();
    let a = Workload::generate(spec(), &tok);
    let b = Workload::generate(spec(), &tok);
    assert_eq!(a, b);
    let c = Workload::generate(WorkloadSpec { seed: 43, ..spec() }, &tok);
    assert_ne!(a.system_prompts, c.system_prompts);
}

#[test]
fn multi_turn_sessions_extend_the_conversation() {
    let tok = Tokenizer::fallback();
    let w = Workload::generate(WorkloadSpec { turns: 3, ..spec() }, &tok);
    assert_eq!(w.num_requests(), 36);
    let s = &w.sessions[0];
    assert_eq!(s.questions.len(), 3);
    let p1 = w.first_prompt(s);
    let p2 = follow_up(&p1, " the and", &s.questions[1]);
    assert!(p2.starts_with(&p1));
    assert_eq!(tok.encode(&p2, false).len(), 80 + 2 + 16);
    // Keeping the first groups keeps exactly their sessions.
    let part = w.clone().with_groups(2);
    assert_eq!(part.sessions.len(), 6);
    assert!(part.sessions.iter().all(|s| s.group < 2));
}

#[test]
fn quick_scenarios_keep_the_published_shape() {
    let long = Scenario::long(true, 1);
    assert_eq!(
        (
            long.workload.num_groups,
            long.workload.prompts_per_group,
            long.workload.system_prompt_len,
            long.workload.question_len,
            long.workload.output_len,
            long.max_concurrency
        ),
        (256, 8, 4096, 256, 128, 300)
    );
    let short = Scenario::short(false, 1);
    assert_eq!(
        (
            short.workload.prompts_per_group,
            short.workload.system_prompt_len,
            short.workload.question_len
        ),
        (32, 256, 4096)
    );
    assert_eq!(short.request_rate, 800.0);
}

fn sample(ok: bool, ttft: f64, e2e: f64) -> Sample {
    Sample {
        ok,
        ttft_s: ttft,
        e2e_s: e2e,
        output_tokens: if ok { 10 } else { 0 },
    }
}

#[test]
fn report_aggregates_and_compares_with_random() {
    let engines = [
        EngineCounters {
            requests: 2,
            prefix_queries: 100,
            prefix_hits: 30,
            preemptions: 1,
        },
        EngineCounters {
            requests: 1,
            prefix_queries: 100,
            prefix_hits: 50,
            preemptions: 0,
        },
    ];
    let random = PolicyResult::from_samples(
        "long",
        "random",
        &[
            sample(true, 1.0, 4.0),
            sample(true, 3.0, 6.0),
            sample(false, 9.0, 9.0),
        ],
        2.0,
        &engines,
    );
    assert_eq!(random.requests, 3);
    assert_eq!(random.failed, 1);
    assert_eq!(random.throughput_rps, 1.0);
    assert_eq!(random.output_tps, 10.0);
    assert_eq!(random.ttft_mean_s, 2.0);
    assert_eq!(random.ttft_p50_s, 1.0);
    assert_eq!(random.ttft_p99_s, 3.0);
    assert_eq!(random.e2e_mean_s, 5.0);
    assert_eq!(random.e2e_p99_s, 6.0);
    assert_eq!(random.cache_hit_rate, 0.4);
    assert_eq!(random.requests_per_engine, vec![2, 1]);
    assert_eq!(random.preemptions, 1);
    let best = PolicyResult::from_samples(
        "long",
        "best",
        &[
            sample(true, 0.5, 1.0),
            sample(true, 0.5, 1.0),
            sample(true, 0.5, 1.0),
        ],
        1.0,
        &engines,
    );
    let mut rows = vec![random, best];
    report::fill_ratios(&mut rows);
    assert_eq!(rows[0].throughput_vs_random, Some(1.0));
    assert_eq!(rows[1].throughput_vs_random, Some(3.0));
    assert_eq!(rows[1].ttft_vs_random, Some(0.25));

    let table = report::markdown_table(&rows);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(
        lines[3],
        "| long | real | best | 3/3 | 3.00 | 30 | 0.500 | 0.500 | 0.500 | 1.00 | 1.00 | 40.0% | 2/1 | 3.00x | 0.25x |"
    );

    let json: serde_json::Value = serde_json::to_value(&rows).unwrap();
    for key in [
        "scenario",
        "policy",
        "throughput_rps",
        "output_tps",
        "ttft_mean_s",
        "ttft_p99_s",
        "e2e_mean_s",
        "cache_hit_rate",
    ] {
        assert!(json[1].get(key).is_some(), "missing {key}");
    }
    assert_eq!(json[1]["throughput_rps"], 3.0);
}

/// A policy run under three seeds: `throughput` req/s in 1 s (one request per unit, TTFT
/// `ttft`), one engine.
fn seeded(policy: &str, throughputs: [usize; 3], ttft: f64) -> PolicyResult {
    let runs: Vec<PolicyResult> = throughputs
        .iter()
        .map(|&n| {
            let samples = vec![sample(true, ttft, 1.0); n];
            let engines = [EngineCounters {
                requests: n as u64,
                ..EngineCounters::default()
            }];
            let mut r = PolicyResult::from_samples("long", policy, &samples, 1.0, &engines);
            r.clock = "virtual".to_owned();
            r
        })
        .collect();
    PolicyResult::over_seeds(&runs, &[1, 2, 3]).expect("three runs")
}

#[test]
fn seeds_give_the_median_and_range_and_overlaps_are_marked() {
    assert_eq!(report::median(&[3.0, 1.0, 2.0]), 2.0);
    assert_eq!(report::median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    assert_eq!(report::median(&[]), 0.0);

    let random = seeded("random", [10, 12, 11], 1.0);
    assert_eq!(random.requests, 33);
    assert_eq!(random.throughput_rps, 11.0);
    assert_eq!(
        random.requests_per_engine,
        [11],
        "the median-throughput seed's counts"
    );
    let spread = random.spread.clone().unwrap();
    assert_eq!(spread.seeds, [1, 2, 3]);
    assert_eq!(spread.throughput_rps, [10.0, 12.0]);
    // Clear of random's range in throughput, overlapping it in TTFT (the same 1.0 s).
    let fast = seeded("fast", [30, 31, 29], 1.0);
    // Overlapping in throughput (12 is random's highest).
    let near = seeded("near", [12, 13, 14], 0.5);
    let mut rows = vec![random, fast, near];
    report::fill_ratios(&mut rows);
    assert_eq!(
        rows[0].throughput_differs, None,
        "random is not compared with itself"
    );
    assert_eq!(rows[1].throughput_differs, Some(true));
    assert_eq!(rows[1].ttft_differs, Some(false));
    assert_eq!(rows[2].throughput_differs, Some(false));
    assert_eq!(rows[2].ttft_differs, Some(true));
    let table = report::markdown_table(&rows);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[3],
        "| long | virtual | fast | 90/90 | 30.00 [29.00-31.00] | 300 | 1.000 [1.000-1.000] | 1.000 | 1.000 | 1.00 | 1.00 | 0.0% | 30 | 2.73x | ~1.00x |"
    );
    assert!(lines[4].contains("| ~1.18x | 0.50x |"), "{}", lines[4]);
}

#[test]
fn chart_is_written_as_png() {
    let dir = tempfile::tempdir().unwrap();
    let rows = vec![PolicyResult::from_samples(
        "long",
        "random",
        &[sample(true, 1.0, 2.0)],
        1.0,
        &[EngineCounters::default()],
    )];
    let path = dir.path().join("long.png");
    kthena_bench::chart::draw_scenario(&path, "long", &rows).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert!(kthena_bench::chart::draw_scenario(&path, "short", &rows).is_err());
}
