#!/usr/bin/env bash
# Runs every test of the workspace: unit, integration, doc tests and examples.
# Starts (and, where missing, installs) the services the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh
ensure_services
# The controller's integration tests: one binary (linked once), run one process per module,
# so that each area gets a control plane of its own as when they were separate binaries
# (several start engines, a simulated node or a second control plane and wait on them with
# deadlines). Every other test binary runs all its tests in one process.
status=0
cargo test --workspace --all-features --no-fail-fast --exclude kthena-controller || status=1
cargo test -p kthena-controller --all-features --no-fail-fast --lib --bins || status=1
cargo test -p kthena-controller --all-features --doc || status=1
for m in $(sed -n 's/^mod \([a-z_]*\);.*/\1/p' kthena-controller/tests/it/main.rs); do
    cargo test -p kthena-controller --all-features --test it -- "$m::" || status=1
done
# The container images, from the debug binaries the tests above built (scripts/images.sh).
bash scripts/images-test.sh || status=1
exit "$status"
