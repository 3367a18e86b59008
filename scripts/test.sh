#!/usr/bin/env bash
# Runs every test of the workspace: unit, integration, doc tests and examples.
# Starts (and, where missing, installs) the services the tests need.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh
ensure_services
cargo test --workspace --all-features --no-fail-fast
