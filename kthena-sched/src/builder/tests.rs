//! The embedding contract: reconfiguration that keeps plugin state, owned completion data,
//! per-model tie turns and the prefetch path for remote KV indexes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::{
    Candidate, Completion, Config, EndpointId, InMemoryKvIndex, KvEvent, KvIndex, KvQuery, Request,
    Result, Scheduler, ScoreNote, ScorePlugin, prefix_block_hashes, token_block_hashes,
};

fn config(yaml: &str) -> Config {
    Config::from_yaml(yaml).unwrap()
}

fn two() -> Vec<Candidate> {
    vec![Candidate::new("a", "m"), Candidate::new("b", "m")]
}

fn cache_entries(s: &Scheduler, plugin: &str) -> Option<usize> {
    s.plugin_stats()
        .into_iter()
        .find(|(p, _)| *p == plugin)
        .and_then(|(_, st)| st.cache_entries)
}

const PREFIX_ONLY: &str = "plugins: {Score: {enabled: [{name: prefix-cache, weight: 1}]}}";

#[test]
fn reconfigure_keeps_the_prefix_store_of_a_plugin_in_both_configs() {
    let old = Scheduler::from_config(&config(PREFIX_ONLY)).unwrap();
    let cands = two();
    let prompt = "p".repeat(64 * 3);
    let req = Request::new("m").with_prompt(&prompt);
    let _ = old.on_scheduled(&req, &cands[1]);
    assert_eq!(cache_entries(&old, "prefix-cache"), Some(3));

    let new = old
        .reconfigure(&config(
            "plugins: {Score: {enabled: [{name: prefix-cache, weight: 2}, {name: gpu-usage, weight: 1}]}}",
        ))
        .unwrap();
    assert_eq!(cache_entries(&new, "prefix-cache"), Some(3));
    let d = new.schedule(&req, &cands).unwrap();
    // b: 2 × 100 (all 3 blocks) + 100 (idle); a: 0 + 100.
    assert_eq!(
        d.ranked
            .iter()
            .map(|r| (r.id.as_str(), r.score))
            .collect::<Vec<_>>(),
        [("b", 300.0), ("a", 100.0)]
    );
    assert_eq!(d.match_ratios, [("prefix-cache", 1.0)]);
    // Both schedulers share the store: what the new one learns the old one sees.
    let _ = new.on_scheduled(&Request::new("m").with_prompt("q"), &cands[0]);
    assert_eq!(cache_entries(&old, "prefix-cache"), Some(4));
}

#[test]
fn a_changed_argument_or_a_dropped_plugin_starts_fresh_state() {
    let old = Scheduler::from_config(&config(PREFIX_ONLY)).unwrap();
    let cands = two();
    let prompt = "p".repeat(64 * 2);
    let req = Request::new("m").with_prompt(&prompt);
    let _ = old.on_scheduled(&req, &cands[1]);

    let resized = old
        .reconfigure(&config(
            "pluginConfig: [{name: prefix-cache, args: {blockSizeToHash: 32}}]\n\
             plugins: {Score: {enabled: [{name: prefix-cache, weight: 1}]}}",
        ))
        .unwrap();
    assert_eq!(cache_entries(&resized, "prefix-cache"), Some(0));
    assert_eq!(
        resized.schedule(&req, &cands).unwrap().match_ratios,
        [("prefix-cache", 0.0)]
    );

    // Switched off, then on again: the store went with the plugin.
    let without = old
        .reconfigure(&config(
            "plugins: {Score: {enabled: [{name: gpu-usage, weight: 1}]}}",
        ))
        .unwrap();
    let again = without.reconfigure(&config(PREFIX_ONLY)).unwrap();
    assert_eq!(cache_entries(&again, "prefix-cache"), Some(0));
    // The unchanged old scheduler still has it.
    assert_eq!(cache_entries(&old, "prefix-cache"), Some(2));
}

const KV: &str = "pluginConfig: [{name: kvcache-aware, args: {blockSizeToHash: 2}}]\n\
                  plugins: {Score: {enabled: [{name: kvcache-aware, weight: 1}]}}";

fn stored(tokens: &[u32]) -> KvEvent {
    KvEvent::BlockStored {
        block_hashes: (1..=tokens.len() as u64 / 2).collect(),
        parent_block_hash: None,
        token_ids: tokens.to_vec(),
        block_size: 2,
    }
}

#[test]
fn reconfigure_keeps_the_kv_index_while_its_block_size_and_cap_stay() {
    let old = Scheduler::from_config(&config(KV)).unwrap();
    let index = Arc::clone(old.kv_index().unwrap());
    index
        .apply(&EndpointId::new("b"), &stored(&[1, 2, 3, 4]))
        .unwrap();

    let new = old
        .reconfigure(&config(
            "pluginConfig:\n\
             - {name: kvcache-aware, args: {blockSizeToHash: 2}}\n\
             - {name: least-prefill, args: {blockSizeToHash: 2}}\n\
             plugins: {Score: {enabled: [{name: kvcache-aware, weight: 3}, {name: least-prefill, weight: 1}]}}",
        ))
        .unwrap();
    assert!(Arc::ptr_eq(new.kv_index().unwrap(), &index));
    let tokens = [1, 2, 3, 4];
    let req = Request::new("m").with_token_ids(&tokens);
    let d = new.schedule(&req, &two()).unwrap();
    assert_eq!(d.best().id.as_str(), "b");
    assert_eq!(
        d.match_ratios,
        [("kvcache-aware", 1.0), ("least-prefill", 1.0)]
    );

    let recapped = old
        .reconfigure(&config(
            "pluginConfig: [{name: kvcache-aware, args: {blockSizeToHash: 2, maxIndexEntries: 10}}]\n\
             plugins: {Score: {enabled: [{name: kvcache-aware, weight: 1}]}}",
        ))
        .unwrap();
    assert!(!Arc::ptr_eq(recapped.kv_index().unwrap(), &index));
    assert_eq!(recapped.kv_index().unwrap().len(), 0);
}

#[test]
fn reconfigure_keeps_the_host_index_seed_and_top_n() {
    let host: Arc<dyn KvIndex> = Arc::new(InMemoryKvIndex::new(2, 100).unwrap());
    let old = Scheduler::builder(config(KV))
        .kv_index(Arc::clone(&host))
        .top_n(1)
        .build()
        .unwrap();
    let new = old
        .reconfigure(&config(&KV.replace("weight: 1", "weight: 5")))
        .unwrap();
    assert!(Arc::ptr_eq(new.kv_index().unwrap(), &host));
    let tokens = [9, 9];
    let d = new
        .schedule(&Request::new("m").with_token_ids(&tokens), &two())
        .unwrap();
    assert_eq!(d.ranked.len(), 1, "top_n carried over");
}

/// A host plugin that records what `on_completed` receives.
#[derive(Debug, Default)]
struct Recorder(Mutex<Vec<(Completion, bool)>>);

impl ScorePlugin for Arc<Recorder> {
    fn name(&self) -> &'static str {
        "recorder"
    }
    fn score(&self, _: &Request<'_>, _: &[&Candidate], out: &mut [f64]) -> ScoreNote {
        out.fill(0.0);
        ScoreNote::default()
    }
    fn completion_blocks(&self, _: &Request<'_>) -> Option<Arc<[u64]>> {
        Some(Arc::from([7u64, 8]))
    }
    fn on_completed(&self, done: &Completion, success: bool) {
        self.0.lock().unwrap().push((done.clone(), success));
    }
}

#[test]
fn completion_data_is_owned_and_reaches_the_plugins() -> Result<()> {
    let rec = Arc::new(Recorder::default());
    let mut registry = crate::Registry::builtin();
    let r2 = Arc::clone(&rec);
    registry.register_score("recorder", move |_, _| Ok(Box::new(Arc::clone(&r2))));
    let s = Scheduler::builder(config(
        "pluginConfig: [{name: kvcache-aware, args: {blockSizeToHash: 2}}]\n\
         plugins: {Score: {enabled: [{name: prefix-cache, weight: 1}, {name: kvcache-aware, weight: 1}, {name: recorder, weight: 1}]}}",
    ))
    .registry(registry)
    .build()?;
    let cands = two();
    s.kv_index()
        .unwrap()
        .apply(&EndpointId::new("b"), &stored(&[1, 2]))?;
    let done = {
        // The request and its prompt live only in this block.
        let prompt = String::from("x").repeat(100);
        let tokens = vec![1, 2, 3, 4, 5];
        let req = Request::new("m")
            .with_prompt(&prompt)
            .with_token_ids(&tokens)
            .with_lora("ad")
            .with_session("u1");
        s.on_scheduled(&req, &cands[1])
    };
    assert_eq!(done.endpoint.as_str(), "b");
    assert_eq!(
        (&*done.model, done.lora.as_deref(), done.session.as_deref()),
        ("m", Some("ad"), Some("u1"))
    );
    // 5 tokens, of which b holds the first block of 2.
    assert_eq!((done.prompt_tokens, done.prefill_tokens), (5, 3));
    let mut want = Vec::new();
    prefix_block_hashes("m", "x".repeat(100).as_bytes(), 64, 128, &mut want);
    assert_eq!(done.blocks("prefix-cache"), Some(&want[..]));
    token_block_hashes(&[1, 2, 3, 4, 5], 2, 128, &mut want);
    assert_eq!(done.blocks("kvcache-aware"), Some(&want[..]));
    assert_eq!(done.blocks("recorder"), Some(&[7u64, 8][..]));
    assert_eq!(done.blocks("gpu-usage"), None);

    s.on_completed(&done, false);
    let got = rec.0.lock().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0], (done, false));
    Ok(())
}

#[test]
fn a_request_without_a_kv_index_prefills_its_whole_prompt() {
    let s = Scheduler::from_config(&config(PREFIX_ONLY)).unwrap();
    let done = s.on_scheduled(&Request::new("m").with_prompt("0123456789"), &two()[0]);
    // ceil(10 bytes / 4).
    assert_eq!((done.prompt_tokens, done.prefill_tokens), (3, 3));
    let bare = Completion::new(
        &Request::new("m").with_prompt("0123456789"),
        EndpointId::new("a"),
    );
    assert_eq!((bare.prompt_tokens, bare.prefill_tokens), (3, 3));
    assert_eq!(bare.blocks("prefix-cache"), None);
    assert_eq!(done.blocks("prefix-cache").map(<[u64]>::len), Some(1));
}

#[test]
fn tied_candidates_take_turns_per_model() {
    let s = Scheduler::from_config(&config(
        "plugins: {Score: {enabled: [{name: gpu-usage, weight: 1}]}}",
    ))
    .unwrap();
    let cands = two();
    let (a, b) = (Request::new("model-a"), Request::new("model-b"));
    let mut seen = Vec::new();
    for _ in 0..3 {
        for r in [&a, &b] {
            let d = s.schedule(r, &cands).unwrap();
            seen.push((r.model, d.best().id.as_str().to_owned()));
        }
    }
    // Interleaved models each see a, b, a: one shared counter would give model-a only `a`.
    let of = |m: &str| {
        seen.iter()
            .filter(|(x, _)| *x == m)
            .map(|(_, id)| id.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(of("model-a"), ["a", "b", "a"]);
    assert_eq!(of("model-b"), ["a", "b", "a"]);
}

/// A remote index: counts `match_prefix` calls (which would block on I/O).
#[derive(Debug, Default)]
struct Remote(AtomicUsize);

impl KvIndex for Remote {
    fn apply(&self, _: &EndpointId, _: &KvEvent) -> Result<()> {
        Ok(())
    }
    fn match_prefix(&self, _: &KvQuery<'_>, cands: &[&Candidate], out: &mut [u32]) {
        self.0.fetch_add(1, Ordering::Relaxed);
        for (o, c) in out.iter_mut().zip(cands) {
            *o = u32::from(c.id.as_str() == "a");
        }
    }
    fn remove_endpoint(&self, _: &EndpointId) {}
    fn block_size(&self) -> Option<usize> {
        None
    }
    fn len(&self) -> usize {
        0
    }
    fn is_remote(&self) -> bool {
        true
    }
}

const TWO_LOOKUPS: &str = "pluginConfig:\n\
    - {name: kvcache-aware, args: {blockSizeToHash: 2}}\n\
    - {name: least-prefill, args: {blockSizeToHash: 4, maxBlocksToMatch: 1}}\n\
    plugins: {Score: {enabled: [{name: kvcache-aware, weight: 1}, {name: least-prefill, weight: 1}]}}";

#[test]
fn prepare_returns_one_lookup_per_block_size_and_only_for_a_remote_index() {
    let tokens: Vec<u32> = (1..=8).collect();
    let req = Request::new("m").with_token_ids(&tokens);
    let local = Scheduler::from_config(&config(KV)).unwrap();
    assert!(
        local.prepare(&req).is_none(),
        "in-process index: nothing to fetch"
    );
    let remote = Arc::new(Remote::default());
    let s = Scheduler::builder(config(TWO_LOOKUPS))
        .kv_index(Arc::clone(&remote) as Arc<dyn KvIndex>)
        .build()
        .unwrap();
    assert!(
        s.prepare(&Request::new("m").with_prompt("no tokens"))
            .is_none()
    );
    let p = s.prepare(&req).unwrap();
    let shapes: Vec<_> = p
        .lookups()
        .iter()
        .map(|l| (l.block_size(), l.block_hashes().len(), l.token_ids().len()))
        .collect();
    assert_eq!(shapes, [(2, 4, 8), (4, 1, 4)]);
    assert_eq!(remote.0.load(Ordering::Relaxed), 0);
}

#[test]
fn scheduling_with_a_prefetch_never_calls_the_remote_index() {
    let remote = Arc::new(Remote::default());
    let s = Scheduler::builder(config(TWO_LOOKUPS))
        .kv_index(Arc::clone(&remote) as Arc<dyn KvIndex>)
        .build()
        .unwrap();
    let tokens: Vec<u32> = (1..=8).collect();
    let req = Request::new("m").with_token_ids(&tokens);
    let cands = two();
    let mut p = s.prepare(&req).unwrap();
    // b holds 3 blocks of 2 and the one block of 4.
    p.lookups_mut()[0].answer([(EndpointId::new("b"), 3)]);
    p.lookups_mut()[1].answer([(EndpointId::new("b"), 1)]);
    let req = req.with_prefetch(&p);
    let d = s.schedule(&req, &cands).unwrap();
    // kvcache-aware: b trunc(3/4 × 100) = 75. least-prefill (weight 2, 4 cached): costs
    // b 2 × 4 + 1 = 9, a 2 × 8 + 1 = 17, scores 100 and 100 × 9 / 17.
    let a_score = 100.0 * 9.0 / 17.0;
    assert_eq!(
        d.ranked
            .iter()
            .map(|r| (r.id.as_str(), r.score))
            .collect::<Vec<_>>(),
        [("b", 175.0), ("a", a_score)]
    );
    assert_eq!(
        d.match_ratios,
        [("kvcache-aware", 0.75), ("least-prefill", 1.0)]
    );
    // The longest lookup (blocks of 2) decides what b still prefills: 8 − 3 × 2.
    let done = s.on_scheduled(&req, &cands[1]);
    assert_eq!(done.prefill_tokens, 2);
    assert_eq!(remote.0.load(Ordering::Relaxed), 0, "no blocking lookup");

    // Without the prefetch the index is asked (a holds 1 block of each size).
    let plain = Request::new("m").with_token_ids(&tokens);
    assert_eq!(s.schedule(&plain, &cands).unwrap().best().id.as_str(), "a");
    assert_eq!(remote.0.load(Ordering::Relaxed), 2);
    // An unanswered prefetch counts as no match, still without asking the index.
    let empty = s.prepare(&plain).unwrap();
    let d = s.schedule(&plain.with_prefetch(&empty), &cands).unwrap();
    assert_eq!(
        d.match_ratios,
        [("kvcache-aware", 0.0), ("least-prefill", 0.0)]
    );
    assert_eq!(remote.0.load(Ordering::Relaxed), 2);
}
