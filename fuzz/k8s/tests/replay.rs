//! Replays every seed of `fuzz/seeds/<target>/` (and every reproducer of
//! `fuzz/regressions/<target>/`) through its harness on stable: the CI share of fuzzing. The
//! seed and regression directories are `kthena-fuzz`'s, one level up from this crate.
//! Every harness must accept its seeds without panicking, and every target has seeds.

use std::path::Path;

fn replay(target: &str) -> usize {
    let (_, harness) = kthena_fuzz_k8s::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .unwrap_or_else(|| panic!("no harness named {target}"));
    kthena_fuzz::replay_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
        target,
        *harness,
    )
}

#[test]
fn every_target_has_a_seed_directory_and_libfuzzer_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (name, _) in kthena_fuzz_k8s::TARGETS {
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
    ($feature:literal: $($name:ident),* $(,)?) => {$(
        #[cfg(feature = $feature)]
        #[test]
        fn $name() {
            assert_ne!(replay(stringify!($name)), 0, "no seed for {}", stringify!($name));
        }
    )*};
}

replay_tests! { "router": manifests, router_config }

replay_tests! { "admission": admission_review }

#[test]
fn every_seed_directory_is_a_target_of_one_fuzz_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let names: Vec<&str> = (kthena_fuzz_k8s::TARGETS.iter())
        .chain(kthena_fuzz::TARGETS)
        .map(|(name, _)| *name)
        .collect();
    for dir in std::fs::read_dir(root.join("seeds")).unwrap_or_else(|e| panic!("seeds: {e}")) {
        let dir = dir.unwrap_or_else(|e| panic!("seeds: {e}")).file_name();
        let dir = dir.to_string_lossy();
        assert!(
            names.contains(&dir.as_ref()),
            "fuzz/seeds/{dir} has no harness in kthena-fuzz or kthena-fuzz-k8s"
        );
    }
}
