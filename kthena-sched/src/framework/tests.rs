use super::*;
use crate::types::{Metrics, PdRole};
use crate::{Config, Registry, ScoreNote};

const SPEC_ROUTER_CONFIG: &str = r#"
scheduler:
  pluginConfig:
  - name: least-request
    args: {maxWaitingRequests: 10}
  - name: least-latency
    args: {TTFTTPOTWeightFactor: 0.5}
  - name: prefix-cache
    args: {blockSizeToHash: 64, maxBlocksToMatch: 128, maxHashCacheSize: 50000, topKMatches: 5}
  - name: kvcache-aware
    args: {blockSizeToHash: 16, maxBlocksToMatch: 128, vllmTokenizerPort: 8000, sglangTokenizerPort: 30000}
  plugins:
    Filter:
      enabled: [least-request]
      disabled: [lora-affinity]
    Score:
      enabled:
      - {name: least-request, weight: 1}
      - {name: gpu-usage, weight: 1}
      - {name: least-latency, weight: 1}
      - {name: prefix-cache, weight: 1}
      disabled: []
auth:
  issuer: "https://issuer.example"
  audiences: ["a"]
  jwksUri: "https://issuer.example/jwks.json"
"#;

fn section(yaml: &str) -> Result<Scheduler> {
    Scheduler::from_config(&Config::from_yaml(yaml)?)
}

#[test]
fn spec_router_config_loads_and_matches_default() {
    let cfg = Config::from_router_yaml(SPEC_ROUTER_CONFIG).unwrap();
    assert_eq!(
        cfg.plugins.filter.enabled,
        Config::default().plugins.filter.enabled
    );
    assert_eq!(cfg.plugins.score, Config::default().plugins.score);
    assert_eq!(
        cfg.args("prefix-cache"),
        Config::default().args("prefix-cache")
    );
    assert_eq!(cfg.args("kvcache-aware")["sglangTokenizerPort"], 30000);
    let s = Scheduler::from_config(&cfg).unwrap();
    assert_eq!(s.filters.len(), 1);
    assert_eq!(s.scores.len(), 4);
    assert!(s.kv_index().is_none());
    Scheduler::from_config(&Config::default()).unwrap();
}

#[test]
fn load_time_errors() {
    let cases = [
        (
            "plugins: {Score: {enabled: [{name: nope}]}}",
            "unknown scheduler plugin \"nope\" in plugins.Score.enabled",
        ),
        (
            "plugins: {Filter: {enabled: [gpu-usage]}, Score: {enabled: [{name: gpu-usage}]}}",
            "scheduler plugin \"gpu-usage\" in plugins.Filter.enabled is a score plugin only",
        ),
        (
            "pluginConfig: [{name: typo}]\nplugins: {Score: {enabled: [{name: gpu-usage}]}}",
            "unknown scheduler plugin \"typo\" in pluginConfig",
        ),
        (
            "plugins: {Score: {enabled: [{name: random}, {name: gpu-usage}]}}",
            "score plugin \"random\" cannot be combined with other score plugins ([\"gpu-usage\"])",
        ),
        ("{}", "the scheduler configuration enables no score plugin"),
        (
            "plugins: {Filter: {enabled: [least-request]}}",
            "the scheduler configuration enables no score plugin",
        ),
        (
            "plugins: {Score: {enabled: [{name: gpu-usage, weight: -1}]}}",
            "invalid weight -1 for score plugin \"gpu-usage\": must be a number in [0, 1000000]",
        ),
        (
            "plugins: {Score: {enabled: [{name: gpu-usage}, {name: gpu-usage}]}}",
            "scheduler plugin \"gpu-usage\" is listed twice in plugins.Score.enabled",
        ),
        (
            "pluginConfig: [{name: least-latency, args: {TTFTTPOTWeightFactor: 2}}]\nplugins: {Score: {enabled: [{name: least-latency}]}}",
            "invalid args for scheduler plugin \"least-latency\": TTFTTPOTWeightFactor must be finite and in [0, 1], got 2",
        ),
        (
            "pluginConfig: [{name: least-request, args: {maxWaitingRequests: 0}}]\nplugins: {Score: {enabled: [{name: least-request}]}}",
            "invalid args for scheduler plugin \"least-request\": maxWaitingRequests must be > 0",
        ),
        (
            "pluginConfig: [{name: gpu-usage, args: {x: 1}}]\nplugins: {Score: {enabled: [{name: gpu-usage}]}}",
            "invalid args for scheduler plugin \"gpu-usage\": this plugin takes no args",
        ),
    ];
    for (yaml, msg) in cases {
        let e = section(yaml).unwrap_err();
        assert_eq!(e.to_string(), msg, "{yaml}");
    }
    // Args of a configured but disabled plugin are checked too.
    let e = section(
        "pluginConfig: [{name: kvcache-aware, args: {maxBlocksToMatch: 0}}]\nplugins: {Score: {enabled: [{name: gpu-usage}]}}",
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid args for scheduler plugin \"kvcache-aware\": maxBlocksToMatch must be > 0"
    );
    let e = section("pluginConfig: [{name: prefix-cache, args: {topK: 1}}]\nplugins: {Score: {enabled: [{name: prefix-cache}]}}")
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown key `pluginConfig[0].args.topK`: did you mean `topKMatches`?"
    );
    assert!(matches!(
        Config::from_yaml("plugins: [1"),
        Err(Error::Yaml(_))
    ));
    assert!(matches!(
        Config::from_router_yaml("auth: {}"),
        Err(Error::NoPlugins)
    ));
}

#[test]
fn random_alone_is_allowed_and_seeded() {
    let yaml = "plugins: {Score: {enabled: [{name: random}]}}";
    let cfg = Config::from_yaml(yaml).unwrap();
    let cands: Vec<Candidate> = (0..20)
        .map(|i| Candidate::new(format!("e{i:02}"), "m"))
        .collect();
    let pick = |seed| {
        let s = Scheduler::builder(cfg.clone()).seed(seed).build().unwrap();
        (0..10)
            .map(|_| {
                s.schedule(&Request::new("m"), &cands)
                    .unwrap()
                    .best()
                    .id
                    .clone()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(pick(1), pick(1));
    assert_ne!(pick(1), pick(2));
}

fn gpu_only() -> Scheduler {
    section("plugins: {Score: {enabled: [{name: gpu-usage, weight: 2}]}}").unwrap()
}

fn usage(id: &str, u: f64) -> Candidate {
    Candidate::new(id, "m").with_metrics(Metrics {
        kv_cache_usage: u,
        ..Metrics::default()
    })
}

#[test]
fn ranks_by_weighted_total_with_ties_by_id() {
    let s = gpu_only();
    let cands = [
        usage("d", 0.5),
        usage("c", 0.1),
        usage("b", 0.5),
        usage("a", 0.9),
        usage("e", 0.5),
        usage("f", 0.5),
        usage("g", 0.95),
    ];
    let d = s.schedule(&Request::new("m"), &cands).unwrap();
    let ids: Vec<&str> = d.ranked.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["c", "b", "d", "e", "f"]); // top 5; the 50s ordered by id
    assert_eq!(d.ranked[0].score, 180.0); // weight 2 × 90
    assert_eq!(d.ranked[0].index, 1);
    assert_eq!(d.best().id.as_str(), "c");
}

#[test]
fn top_n_is_configurable() {
    let s = Scheduler::builder(
        Config::from_yaml("plugins: {Score: {enabled: [{name: gpu-usage}]}}").unwrap(),
    )
    .top_n(2)
    .build()
    .unwrap();
    let cands = [usage("a", 0.3), usage("b", 0.2), usage("c", 0.1)];
    let d = s.schedule(&Request::new("m"), &cands).unwrap();
    assert_eq!(
        d.ranked.iter().map(|r| r.index).collect::<Vec<_>>(),
        vec![2, 1]
    );
}

#[test]
fn filters_narrow_and_report_the_emptying_filter() {
    let s = Scheduler::from_config(&Config::default()).unwrap();
    let busy = |id: &str, waiting| {
        Candidate::new(id, "m").with_metrics(Metrics {
            waiting_requests: waiting,
            ..Metrics::default()
        })
    };
    let d = s
        .schedule(&Request::new("m"), &[busy("a", 10), busy("b", 3)])
        .unwrap();
    assert_eq!(d.ranked.len(), 1);
    assert_eq!(d.best().index, 1);
    let e = s
        .schedule(&Request::new("m"), &[busy("a", 10)])
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "pods have all been filtered out by \"least-request\""
    );
    assert!(matches!(
        s.schedule(&Request::new("m"), &[]),
        Err(Error::NoCandidates)
    ));
}

#[test]
fn prefix_affinity_learns_from_on_scheduled() {
    let s = Scheduler::from_config(&Config::default()).unwrap();
    let cands = [Candidate::new("a", "m"), Candidate::new("b", "m")];
    let prompt = "x".repeat(640);
    let req = Request::new("m").with_prompt(&prompt);
    // Idle and equal: tie broken by id.
    let d = s.schedule(&req, &cands).unwrap();
    assert_eq!(d.best().id.as_str(), "a");
    assert_eq!(d.match_ratios, vec![("prefix-cache", 0.0)]);
    s.on_scheduled(&req, &cands[1]);
    let d = s.schedule(&req, &cands).unwrap();
    assert_eq!(d.best().id.as_str(), "b");
    // least-request 100 + gpu-usage 100 + least-latency 50 + prefix-cache 100.
    assert_eq!(d.best().score, 350.0);
    assert_eq!(d.match_ratios, vec![("prefix-cache", 1.0)]);
    s.on_endpoint_removed(&"b".into());
    // b's affinity is forgotten: both tie again (without the prefix-cache 100).
    let d = s.schedule(&req, &cands).unwrap();
    assert_eq!((d.ranked[0].score, d.ranked[1].score), (250.0, 250.0));
}

#[test]
fn more_tied_candidates_than_top_n_all_take_turns() {
    // Seven endpoints the scores cannot tell apart and the default top 5: every one of the
    // seven gets its turn, not only the five smallest ids.
    let s = section("plugins: {Score: {enabled: [{name: least-latency}]}}").unwrap();
    let cands: Vec<Candidate> = ["g", "f", "e", "d", "c", "b", "a"]
        .iter()
        .map(|id| Candidate::new(*id, "m"))
        .collect();
    let best: Vec<String> = (0..14)
        .map(|_| {
            let d = s.schedule(&Request::new("m"), &cands).unwrap();
            assert_eq!(d.ranked.len(), 5);
            d.best().id.to_string()
        })
        .collect();
    assert_eq!(
        best,
        [
            "a", "b", "c", "d", "e", "f", "g", "a", "b", "c", "d", "e", "f", "g"
        ]
    );
}

#[test]
fn candidates_tied_for_best_take_turns() {
    // least-latency without any latency data scores every endpoint 50: a tie.
    let s = section("plugins: {Score: {enabled: [{name: least-latency}]}}").unwrap();
    let cands = [
        Candidate::new("c", "m"),
        Candidate::new("a", "m"),
        Candidate::new("b", "m"),
    ];
    let best: Vec<String> = (0..4)
        .map(|_| {
            s.schedule(&Request::new("m"), &cands)
                .unwrap()
                .best()
                .id
                .to_string()
        })
        .collect();
    assert_eq!(best, ["a", "b", "c", "a"]);
    // A ranking without a tie at the top leaves the turn alone and keeps id order below.
    let g = gpu_only();
    let cands = [usage("z", 0.0), usage("y", 0.5), usage("x", 0.5)];
    for _ in 0..3 {
        let ids: Vec<String> = g
            .schedule(&Request::new("m"), &cands)
            .unwrap()
            .ranked
            .iter()
            .map(|r| r.id.to_string())
            .collect();
        assert_eq!(ids, ["z", "x", "y"]);
    }
}

#[test]
fn kvcache_aware_exposes_its_index() {
    let s = section(
        "pluginConfig: [{name: kvcache-aware, args: {blockSizeToHash: 2, maxIndexEntries: 8}}]\nplugins: {Score: {enabled: [{name: kvcache-aware}]}}",
    )
    .unwrap();
    let idx = s.kv_index().unwrap();
    let ev = crate::KvEvent::BlockStored {
        block_hashes: vec![7],
        parent_block_hash: None,
        token_ids: vec![1, 2],
        block_size: 2,
    };
    idx.apply(&"b".into(), &ev).unwrap();
    let cands = [Candidate::new("a", "m"), Candidate::new("b", "m")];
    let req = Request::new("m").with_token_ids(&[1, 2, 3, 4]);
    let d = s.schedule(&req, &cands).unwrap();
    assert_eq!(d.best().id.as_str(), "b");
    assert_eq!(d.best().score, 50.0);
    s.on_endpoint_removed(&"b".into());
    assert!(idx.is_empty());
}

#[test]
fn injected_kv_index_is_used() {
    let idx: Arc<dyn KvIndex> = Arc::new(crate::InMemoryKvIndex::new(4, 16).unwrap());
    let yaml = "pluginConfig: [{name: kvcache-aware, args: {blockSizeToHash: 4}}]
plugins: {Score: {enabled: [{name: kvcache-aware}]}}";
    let s = Scheduler::builder(Config::from_yaml(yaml).unwrap())
        .kv_index(idx.clone())
        .build()
        .unwrap();
    assert!(Arc::ptr_eq(s.kv_index().unwrap(), &idx));
    // An injected index of another block size would never match: a load-time error.
    let cfg = Config::from_yaml("plugins: {Score: {enabled: [{name: kvcache-aware}]}}").unwrap();
    let err = Scheduler::builder(cfg).kv_index(idx).build().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid args for scheduler plugin \"kvcache-aware\": blockSizeToHash 16 differs from \
         the shared KV index's block size 4 (kvcache-aware and least-prefill share one index: \
         give both the same blockSizeToHash)"
    );
}

fn pd(id: &str, role: PdRole, group: &str, u: f64) -> Candidate {
    usage(id, u).with_pd(role, group)
}

#[test]
fn pd_pairs_decode_with_best_prefill_of_its_group() {
    let s = gpu_only();
    let cands = [
        pd("d1", PdRole::Decode, "g1", 0.5),
        pd("d2", PdRole::Decode, "g2", 0.1),
        pd("d3", PdRole::Decode, "g3", 0.0), // no prefill in g3: skipped
        pd("p1a", PdRole::Prefill, "g1", 0.7),
        pd("p1b", PdRole::Prefill, "g1", 0.2),
        pd("p2", PdRole::Prefill, "g2", 0.9),
        usage("plain", 0.0), // not part of PD
    ];
    let d = s.schedule_pd(&Request::new("m"), &cands).unwrap();
    let pairs: Vec<(&str, &str)> = d
        .pairs
        .iter()
        .map(|p| (p.decode.id.as_str(), p.prefill.id.as_str()))
        .collect();
    assert_eq!(pairs, [("d2", "p2"), ("d1", "p1b")]);
    assert_eq!(d.pairs[1].prefill.index, 4);
}

#[test]
fn pd_errors() {
    let s = gpu_only();
    let e = s
        .schedule_pd(&Request::new("m"), &[pd("p", PdRole::Prefill, "g", 0.0)])
        .unwrap_err();
    assert_eq!(e.to_string(), "no decode pod found");
    let e = s
        .schedule_pd(
            &Request::new("m"),
            &[
                pd("d", PdRole::Decode, "g1", 0.0),
                pd("p", PdRole::Prefill, "g2", 0.0),
            ],
        )
        .unwrap_err();
    assert_eq!(e.to_string(), "no valid prefill-decode pod pairs found");
    // Filters apply to prefill too: a filtered-out prefill leaves no pair.
    let s = Scheduler::from_config(&Config::default()).unwrap();
    let mut p = pd("p", PdRole::Prefill, "g", 0.0);
    p.metrics.waiting_requests = 100;
    let e = s
        .schedule_pd(&Request::new("m"), &[pd("d", PdRole::Decode, "g", 0.0), p])
        .unwrap_err();
    assert!(matches!(e, Error::NoPdPairs));
}

#[derive(Debug)]
struct Wild;

impl ScorePlugin for Wild {
    fn name(&self) -> &'static str {
        "wild"
    }
    fn score(&self, _: &Request<'_>, _: &[&Candidate], out: &mut [f64]) -> ScoreNote {
        out.copy_from_slice(&[f64::NAN, 250.0, -3.0, 40.0][..out.len()]);
        ScoreNote::default()
    }
}

#[derive(Debug)]
struct Readmit;

impl FilterPlugin for Readmit {
    fn name(&self) -> &'static str {
        "readmit"
    }
    fn filter(&self, _: &Request<'_>, _: &[&Candidate], keep: &mut [bool]) {
        keep.fill(true);
    }
}

#[test]
fn host_plugins_are_registered_and_checked() {
    let mut reg = Registry::builtin();
    reg.register_score("wild", |_, _| Ok(Box::new(Wild)));
    reg.register_filter("readmit", |_, _| Ok(Box::new(Readmit)));
    let cfg = Config::from_yaml(
        "plugins: {Filter: {enabled: [least-request, readmit]}, Score: {enabled: [{name: wild}]}}",
    )
    .unwrap();
    let s = Scheduler::builder(cfg).registry(reg).build().unwrap();
    let mut cands: Vec<Candidate> = ["a", "b", "c", "d", "e"]
        .iter()
        .map(|i| Candidate::new(*i, "m"))
        .collect();
    cands[0].metrics.waiting_requests = 99; // removed by least-request, not re-admitted
    let d = s.schedule(&Request::new("m"), &cands).unwrap();
    // Scores for b..e: NaN→0, 250→100, −3→0, 40.
    let got: Vec<(&str, f64)> = d.ranked.iter().map(|r| (r.id.as_str(), r.score)).collect();
    assert_eq!(got, [("c", 100.0), ("e", 40.0), ("b", 0.0), ("d", 0.0)]);
    assert_eq!(s.score_violations(), 3);
}

#[test]
fn config_round_trips_through_serde() {
    let cfg = Config::default();
    let json = serde_json::to_value(&cfg).unwrap();
    assert_eq!(
        json["plugins"]["Score"]["enabled"][3]["name"],
        "prefix-cache"
    );
    assert_eq!(json["pluginConfig"][1]["args"]["TTFTTPOTWeightFactor"], 0.5);
    let back: Config = serde_json::from_value(json).unwrap();
    assert_eq!(back, cfg);
}

#[test]
fn least_prefill_shares_the_kv_index_and_estimates_prefill_tokens() {
    let s = section(
        "pluginConfig:
- {name: kvcache-aware, args: {blockSizeToHash: 4}}
- {name: least-prefill, args: {blockSizeToHash: 4}}
plugins: {Score: {enabled: [{name: kvcache-aware}, {name: least-prefill}]}}",
    )
    .unwrap();
    let idx = s.kv_index().unwrap();
    let tokens: Vec<u32> = (0..10).collect();
    let req = Request::new("m").with_token_ids(&tokens);
    let (a, b) = (Candidate::new("a", "m"), Candidate::new("b", "m"));
    assert_eq!(s.prefill_tokens(&req, &a), 10);
    // An engine event for b's first block: 10 − 4 tokens left to prefill there.
    idx.apply(
        &"b".into(),
        &crate::KvEvent::BlockStored {
            block_hashes: vec![1],
            parent_block_hash: None,
            token_ids: vec![0, 1, 2, 3],
            block_size: 4,
        },
    )
    .unwrap();
    assert_eq!(s.prefill_tokens(&req, &b), 6);
    // Routing the request to a records both full blocks there (by both plugins).
    s.on_scheduled(&req, &a);
    assert_eq!(s.prefill_tokens(&req, &a), 2);
    // No token ids: ceil(bytes / 4).
    assert_eq!(
        s.prefill_tokens(&Request::new("m").with_prompt("12345"), &a),
        2
    );
    // Without an index every token counts.
    let plain = section("plugins: {Score: {enabled: [{name: random}]}}").unwrap();
    assert_eq!(plain.prefill_tokens(&req, &a), 10);
}

#[test]
fn kv_plugins_must_agree_on_the_block_size() {
    let err = section(
        "pluginConfig:
- {name: kvcache-aware, args: {blockSizeToHash: 16}}
- {name: least-prefill, args: {blockSizeToHash: 64}}
plugins: {Score: {enabled: [{name: kvcache-aware}, {name: least-prefill}]}}",
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid args for scheduler plugin \"least-prefill\": blockSizeToHash 64 differs from \
         the shared KV index's block size 16 (kvcache-aware and least-prefill share one index: \
         give both the same blockSizeToHash)"
    );
    // A score plugin among the filters, and the reverse.
    assert_eq!(
        section(
            "plugins: {Filter: {enabled: [least-prefill]}, Score: {enabled: [{name: random}]}}"
        )
        .unwrap_err()
        .to_string(),
        "scheduler plugin \"least-prefill\" in plugins.Filter.enabled is a score plugin only"
    );
    assert_eq!(
        section("plugins: {Score: {enabled: [{name: lora-affinity}]}}")
            .unwrap_err()
            .to_string(),
        "scheduler plugin \"lora-affinity\" in plugins.Score.enabled is a filter plugin only"
    );
}

#[test]
fn plugin_timings_with_a_clock_only() {
    #[allow(
        clippy::disallowed_methods,
        reason = "a wall clock for the timing test"
    )]
    fn clock() -> std::time::Instant {
        std::time::Instant::now()
    }
    let cfg = Config::from_router_yaml(SPEC_ROUTER_CONFIG).unwrap();
    let cands = [Candidate::new("a", "m"), Candidate::new("b", "m")];
    let req = Request::new("m").with_prompt("hello");
    let plain = Scheduler::from_config(&cfg).unwrap();
    assert!(
        plain
            .schedule(&req, &cands)
            .unwrap()
            .plugin_timings
            .is_empty()
    );
    let timed = Scheduler::builder(cfg).clock(clock).build().unwrap();
    let d = timed.schedule(&req, &cands).unwrap();
    let seen: Vec<(&str, &str)> = d
        .plugin_timings
        .iter()
        .map(|t| (t.plugin, t.kind.as_str()))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("least-request", "filter"),
            ("least-request", "score"),
            ("gpu-usage", "score"),
            ("least-latency", "score"),
            ("prefix-cache", "score"),
        ]
    );
    assert!(d.plugin_timings.iter().all(|t| t.seconds >= 0.0));
    let stats = timed.plugin_stats();
    assert_eq!(stats.len(), 4);
    assert_eq!(stats[3].0, "prefix-cache");
    assert_eq!(stats[3].1.cache_entries, Some(0));
    timed.on_scheduled(&req, &cands[0]);
    assert_eq!(timed.plugin_stats()[3].1.cache_entries, Some(1));
}

/// A candidate with `in_flight` requests, all running, and `pending` prefill tokens queued.
fn busy(id: &str, in_flight: u32, pending: u64) -> Candidate {
    let mut c = Candidate::new(id, "m");
    c.metrics.in_flight = in_flight;
    c.metrics.running_requests = in_flight;
    c.metrics.pending_prefill_tokens = pending;
    c
}

#[test]
fn recommended_spills_a_hot_system_prompt_and_keeps_a_conversation() {
    let old = section(
        "plugins: {Score: {enabled: [{name: least-request, weight: 1}, \
         {name: kvcache-aware, weight: 3}, {name: least-prefill, weight: 1}]}}",
    )
    .unwrap();
    let new = Scheduler::from_config(&Config::recommended()).unwrap();
    // A hot 2,048-token system prompt that engine a holds, with 20 requests in flight there
    // and 5,120 prefill tokens queued; b is idle. A new 256-token question: a saves 2,048
    // tokens of prefill but has more than that queued ahead of it.
    let system: Vec<u32> = (0..2048).collect();
    let mut prompt = system.clone();
    prompt.extend(10_000..10_256u32);
    let cands = [busy("a", 20, 5120), busy("b", 0, 0)];
    for s in [&old, &new] {
        s.on_scheduled(&Request::new("m").with_token_ids(&system), &cands[0]);
    }
    let req = Request::new("m").with_token_ids(&prompt);
    // Before: affinity won whatever the load (a: 0 + 300 + 100 × 4,609 / 5,633, b: 100 +
    // 0 + 100).
    assert_eq!(old.schedule(&req, &cands).unwrap().best().id.as_str(), "a");
    // Now: a = 0 + 100 + 3 × 100 × 4,609 / 5,633 = 345.5, b = 100 + 0 + 300.
    let d = new.schedule(&req, &cands).unwrap();
    assert_eq!(d.best().id.as_str(), "b");
    assert_eq!(d.ranked[0].score, 400.0);
    // A conversation whose first 12,000 tokens a holds, 10 requests in flight and 2,560
    // prefill tokens queued there: the 600 new tokens stay with their history (a: cost
    // 2,560 + 1,200 + 1 = 3,761, 0 + 100 + 300; b: cost 25,201, 100 + 0 + 3 × 14.9).
    let history: Vec<u32> = (20_000..32_000).collect();
    let mut turn = history.clone();
    turn.extend(40_000..40_600u32);
    let cands = [busy("a", 10, 2560), busy("b", 0, 0)];
    new.on_scheduled(&Request::new("m").with_token_ids(&history), &cands[0]);
    let d = new
        .schedule(&Request::new("m").with_token_ids(&turn), &cands)
        .unwrap();
    assert_eq!(d.best().id.as_str(), "a");
    assert_eq!(d.ranked[0].score, 400.0);
}
