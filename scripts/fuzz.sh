#!/usr/bin/env bash
# Runs the libFuzzer targets of fuzz/libfuzzer (harnesses in fuzz/src, crate kthena-fuzz, and
# fuzz/k8s/src, crate kthena-fuzz-k8s; docs/reliability.md).
#
#   scripts/fuzz.sh TARGET|all SECONDS      # e.g. scripts/fuzz.sh kv_events 600
#   scripts/fuzz.sh list                    # the target names
#
# Needs a nightly toolchain (rustup) and cargo-fuzz, which is installed from crates.io into
# $KTHENA_CACHE/cargo-fuzz (default /var/cache/kthena) when missing. Each target's growing
# corpus lives in $FUZZ_WORK/corpus/TARGET (default target/fuzz), seeded from
# fuzz/seeds/TARGET; a crashing input is written to $FUZZ_WORK/artifacts/TARGET/ and the script
# exits 1. Build: release with debug assertions and overflow checks, no sanitizer (the code
# is safe Rust; libFuzzer's coverage instrumentation only), in $FUZZ_TARGET_DIR (default
# $FUZZ_WORK/build). Each target is built with only the feature it needs (its
# `required-features` in fuzz/libfuzzer/Cargo.toml): `hot_path` for the targets of
# kthena-fuzz (requests, SSE, engine metrics, KV events, tokenization), which compile neither
# kube nor the router; `router` for manifests and router_config and `admission` for
# admission_review (kthena-fuzz-k8s), so the router's targets never compile the controller.
# Prints one summary line per target: executions, executions per second, corpus size, crash
# or not.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
CACHE=${KTHENA_CACHE:-/var/cache/kthena}
FUZZ_WORK=${FUZZ_WORK:-$PWD/target/fuzz}
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$FUZZ_WORK/build}
export PATH=$CACHE/cargo-fuzz/bin:$PATH
FUZZ_DIR=fuzz/libfuzzer

log() { echo "fuzz.sh: $*" >&2; }
targets() { sed -n 's/^name = "\(.*\)"$/\1/p' "$FUZZ_DIR/Cargo.toml" | grep -v '^kthena-fuzz-targets$'; }
# The one feature a target requires (`required-features = ["hot_path"]` in its [[bin]]).
feature_of() {
    awk -v t="$1" '/^name = /{n=$3; gsub(/"/, "", n)}
        /^required-features = / && n == t {f=$3; gsub(/[^a-z_]/, "", f); print f; exit}' \
        "$FUZZ_DIR/Cargo.toml"
}

if [[ ${1:-} == list ]]; then targets; exit 0; fi
if [[ $# -ne 2 || ! $2 =~ ^[0-9]+$ ]]; then
    echo "usage: scripts/fuzz.sh TARGET|all SECONDS | list" >&2
    exit 2
fi
if [[ $1 == all ]]; then mapfile -t run < <(targets); else run=("$1"); fi
for t in "${run[@]}"; do
    targets | grep -qx "$t" || { log "no target $t (scripts/fuzz.sh list)"; exit 2; }
done

if ! rustup toolchain list | grep -q '^nightly'; then
    log "installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal >&2
fi
if ! command -v cargo-fuzz >/dev/null || [[ $(cargo-fuzz --version) != *"$CARGO_FUZZ_VERSION"* ]]; then
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.cargo-fuzz.lock"
    flock 9
    if ! command -v cargo-fuzz >/dev/null; then
        log "installing cargo-fuzz $CARGO_FUZZ_VERSION into $CACHE/cargo-fuzz"
        CARGO_TARGET_DIR=$(mktemp -d) cargo install cargo-fuzz --locked \
            --version "$CARGO_FUZZ_VERSION" --root "$CACHE/cargo-fuzz" >&2
    fi
    exec 9>&-
fi

FLAGS=(--fuzz-dir "$FUZZ_DIR" --sanitizer none --debug-assertions --no-default-features)
log "building ${run[*]} (nightly, release; the first build takes a while)"
if [[ $1 == all ]]; then
    # One build per feature (in the targets' order): every target of that feature at once.
    for f in $(for t in "${run[@]}"; do feature_of "$t"; done | awk '!seen[$0]++'); do
        cargo +nightly fuzz build "${FLAGS[@]}" --features "$f" >&2
    done
else
    cargo +nightly fuzz build "${FLAGS[@]}" --features "$(feature_of "$1")" "$1" >&2
fi

status=0
for t in "${run[@]}"; do
    corpus=$FUZZ_WORK/corpus/$t
    artifacts=$FUZZ_WORK/artifacts/$t/
    mkdir -p "$corpus" "$artifacts"
    out=$FUZZ_WORK/$t.log
    log "running $t for $2 s (log: $out)"
    set +e
    cargo +nightly fuzz run "${FLAGS[@]}" --features "$(feature_of "$t")" "$t" \
        "$corpus" "fuzz/seeds/$t" -- \
        -max_total_time="$2" -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$artifacts" >"$out" 2>&1
    rc=$?
    set -e
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$out" | tail -1)
    files=$(find "$corpus" -type f | wc -l)
    if [[ $rc -eq 0 ]]; then
        echo "$t: ${execs:-0} executions, ${rate:-0} exec/s, corpus $files files, no crash"
    else
        echo "$t: CRASH (exit $rc) after ${execs:-?} executions; input in $artifacts; see $out"
        grep -m5 -E 'panicked at|ERROR: libFuzzer' "$out" || true
        status=1
    fi
done
exit $status
