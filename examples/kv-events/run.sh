#!/usr/bin/env bash
# Starts three kthena-sim engines publishing KV events and kthena-router in front of them
# (router.yaml), then sends the same long system prompt twice and prints where each request
# went and the kvcache-aware match ratio. Ctrl-C stops everything; DEMO_KEEP=0 stops at once.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=../..
# Qwen3's tokenizer.json and tokenizer_config.json (from huggingface.co/Qwen/Qwen3-8B);
# router.yaml names them relative to itself, this script uses $QWEN3_TOKENIZER_DIR.
TOKDIR=${QWEN3_TOKENIZER_DIR:-../../../shared/tokenizers/qwen3}
if [[ ! -f $TOKDIR/tokenizer.json || ! -f $TOKDIR/tokenizer_config.json ]]; then
    echo "run.sh: no Qwen3 tokenizer in $TOKDIR: set QWEN3_TOKENIZER_DIR to a directory with" \
        "tokenizer.json and tokenizer_config.json of Qwen/Qwen3-8B (huggingface.co)" >&2
    exit 2
fi
TOKDIR=$(cd "$TOKDIR" && pwd)
TOK=$TOKDIR/tokenizer.json
CONFIG=$(mktemp --suffix=.yaml)
sed -e "s|../../../shared/tokenizers/qwen3|$TOKDIR|" -e "s|\[manifests.yaml\]|[$PWD/manifests.yaml]|" \
    router.yaml >"$CONFIG"
cargo build --quiet --manifest-path "$ROOT/Cargo.toml" -p kthena-router -p kthena-sim
BIN=$ROOT/target/debug
pids=()
cleanup() { trap - EXIT INT TERM; for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -f "$CONFIG"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
i=0
for fmt in map array map; do
    i=$((i + 1))
    "$BIN/kthena-sim" --port "1810$i" --model Qwen/Qwen3-8B --tokenizer "$TOK" --time-scale 10 \
        --kv-events-port "1560$i" --kv-events-format "$fmt" >"${TMPDIR:-/tmp}/kv-sim-$i.log" 2>&1 &
    pids+=($!)
done
"$BIN/kthena-router" --config "$CONFIG" >"${TMPDIR:-/tmp}/kv-router.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do curl -sf localhost:8080/readyz >/dev/null && break; sleep 0.1; done
sleep 1
SYSTEM=$(python3 -c 'print(" ".join(f"Rule {i}: answer train questions briefly and cite timetable page {i % 9}." for i in range(60)))')
ask() {
    curl -s localhost:8080/v1/chat/completions -H 'content-type: application/json' -d "$(python3 -c '
import json, sys
print(json.dumps({"model": "qwen3", "max_tokens": 8, "messages": [
    {"role": "system", "content": sys.argv[1]}, {"role": "user", "content": sys.argv[2]}]}))' "$SYSTEM" "$1")" >/dev/null
}
ask "When does the first train leave?"
sleep 0.5
ask "And the last one?"
echo "Access log (selected_pod per request) is in ${TMPDIR:-/tmp}/kv-router.log"
grep -o 'selected_pod[^ ,]*' "${TMPDIR:-/tmp}/kv-router.log" | tail -2 || true
curl -s localhost:9090/metrics | grep -E '^kthena_router_(kvcache_aware_match_ratio_(sum|count)|kv_index_entries|kv_events_total)'
if [[ ${DEMO_KEEP:-1} != 0 ]]; then echo "Router on :8080, metrics on :9090. Ctrl-C to stop."; wait; fi
