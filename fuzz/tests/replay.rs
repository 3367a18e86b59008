//! Replays every seed of `fuzz/seeds/<target>/` (and every reproducer of
//! `fuzz/regressions/<target>/`) through its harness on stable: the CI share of fuzzing.
//! Every harness must accept its seeds without panicking, and every target has seeds.

use std::path::Path;

fn replay(target: &str) -> usize {
    let (_, harness) = kthena_fuzz::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no harness named {target}"));
    kthena_fuzz::replay_dir(Path::new(env!("CARGO_MANIFEST_DIR")), target, *harness)
}

#[test]
fn every_target_has_a_seed_directory_and_libfuzzer_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (name, _) in kthena_fuzz::TARGETS {
        assert!(
            root.join("seeds").join(name).is_dir(),
            "no seeds for {name}"
        );
        let target = root
            .join("libfuzzer/fuzz_targets")
            .join(format!("{name}.rs"));
        assert!(target.is_file(), "no libFuzzer target {}", target.display());
    }
}

macro_rules! replay_tests {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            assert_ne!(replay(stringify!($name)), 0, "no seed for {}", stringify!($name));
        }
    )*};
}

replay_tests! {
    openai_request,
    sse_filter,
    engine_metrics,
    kv_events,
    tokenizer_cache,
}
