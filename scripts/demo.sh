#!/usr/bin/env bash
# Runs the main job on one machine: three kthena-sim engines (two "deepseek-r1-1-5b", one
# "deepseek-r1-7b") and kthena-router in standalone mode in front of them, all from
# examples/standalone/. Prints ready-to-paste curl commands. Ctrl-C stops everything.
#
# Needs only `cargo`. Ports: router 8080 (metrics 9090, debug 15000), engines 18001-18003;
# override the router's with ROUTER_PORT / METRICS_PORT / DEBUG_PORT.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUTER_PORT=${ROUTER_PORT:-8080}
METRICS_PORT=${METRICS_PORT:-9090}
DEBUG_PORT=${DEBUG_PORT:-15000}
SIM_ARGS=(--time-scale "${SIM_TIME_SCALE:-1}")

echo "Building kthena-router and kthena-sim ..."
cargo build --quiet -p kthena-router -p kthena-sim
BIN=${CARGO_TARGET_DIR:-target}/debug

# The router runs on a copy of examples/standalone, so editing its manifests to try hot
# reload leaves the repository's files alone.
DEMO_DIR=$(mktemp -d "${TMPDIR:-/tmp}/kthena-demo.XXXXXX")
cp -r examples/standalone/. "$DEMO_DIR/"

pids=()
cleanup() {
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    rm -rf "$DEMO_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_sim() { # port model
    "$BIN/kthena-sim" --port "$1" --model "$2" "${SIM_ARGS[@]}" >"${TMPDIR:-/tmp}/kthena-sim-$1.log" 2>&1 &
    pids+=($!)
}
start_sim 18001 deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B
start_sim 18002 deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B
start_sim 18003 deepseek-ai/DeepSeek-R1-Distill-Qwen-7B

wait_http() { # url what
    local hostport=${1#http://}
    hostport=${hostport%%/*}
    for _ in $(seq 1 100); do
        if command -v curl >/dev/null; then
            if curl -fsS -o /dev/null "$1" 2>/dev/null; then return 0; fi
        elif (exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}") 2>/dev/null; then
            sleep 1 # no curl: the port is open; give the first scrape a moment
            return 0
        fi
        sleep 0.1
    done
    echo "$2 did not come up ($1)" >&2
    return 1
}
for port in 18001 18002 18003; do wait_http "http://127.0.0.1:$port/health" "engine on $port"; done

"$BIN/kthena-router" --config "$DEMO_DIR/router.yaml" \
    --port "$ROUTER_PORT" --metrics-port "$METRICS_PORT" --debug-port "$DEBUG_PORT" &
pids+=($!)
router_pid=$!
wait_http "http://127.0.0.1:$ROUTER_PORT/readyz" "kthena-router"

cat <<MSG

kthena-router is serving on http://127.0.0.1:$ROUTER_PORT in front of three engines.
Try (paste into another terminal):

  curl -s http://127.0.0.1:$ROUTER_PORT/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"deepseek-simple","messages":[{"role":"user","content":"Hello!"}],"max_tokens":32}'

  # streaming, and the "premium" header rule that picks the 7B server:
  curl -sN http://127.0.0.1:$ROUTER_PORT/v1/chat/completions -H 'content-type: application/json' -H 'user-type: premium' \\
    -d '{"model":"deepseek-multi-models","messages":[{"role":"user","content":"Hello!"}],"max_tokens":32,"stream":true}'

  curl -s http://127.0.0.1:$ROUTER_PORT/v1/models
  curl -s http://127.0.0.1:$METRICS_PORT/metrics | grep kthena_router_requests_total
  curl -s http://127.0.0.1:$DEBUG_PORT/debug/config_dump/pods

Edit $DEMO_DIR/manifests/*.yaml (a copy of examples/standalone/) while it runs: valid
changes apply at once.
Press Ctrl-C to stop.
MSG
wait "$router_pid"
