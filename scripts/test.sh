#!/usr/bin/env bash
# Runs every test of the workspace: unit, integration, doc tests and examples.
# Starts (and, where missing, installs) the services the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh
ensure_services
# The controller's integration tests run one at a time: several start engines, a simulated
# node or a second control plane of their own and wait on them with deadlines, which two at
# once on 2 cores can miss. Every other test binary runs its tests in parallel.
status=0
cargo test --workspace --all-features --no-fail-fast --exclude kthena-controller || status=1
cargo test -p kthena-controller --all-features --no-fail-fast -- --test-threads=1 || status=1
exit "$status"
