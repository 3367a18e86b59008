#!/usr/bin/env bash
# Dependency-direction guard (STYLE.md §2.2).
# - kthena-sched and kthena-autoscale (without default features) must never depend on
#   kube, hyper, tower or tokio: they are leaf crates other proxies embed.
# - No library crate may depend on anyhow (normal dependencies; dev-dependencies are fine).
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0
members=$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
m = json.load(sys.stdin)
for p in m["packages"]:
    kinds = {k for t in p["targets"] for k in t["kind"]}
    print(p["name"], "lib" if ("lib" in kinds or "rlib" in kinds) else "bin")
')

leaf_check() {
    local pkg=$1; shift
    if ! grep -q "^$pkg " <<<"$members"; then return 0; fi
    local tree
    tree=$(cargo tree -p "$pkg" -e normal --prefix none "$@" | awk '{print $1}' | sort -u)
    for bad in kube kube-client kube-core kube-runtime hyper hyper-util tower tokio; do
        if grep -qx "$bad" <<<"$tree"; then
            echo "check-deps: $pkg depends on $bad (forbidden for a leaf crate)" >&2
            fail=1
        fi
    done
}
leaf_check kthena-sched
leaf_check kthena-autoscale --no-default-features

while read -r pkg kind; do
    [ "$kind" = "lib" ] || continue
    # Only the library target's normal dependencies count: binaries and examples may use anyhow.
    if cargo tree -p "$pkg" -e normal --depth 1 --prefix none | awk 'NR>1{print $1}' | grep -qx anyhow; then
        # A package whose only anyhow users are its binaries declares it optional or as a
        # dev-dependency; a plain normal dependency reaches the library too.
        echo "check-deps: library crate $pkg depends on anyhow (use its thiserror Error)" >&2
        fail=1
    fi
done <<<"$members"

if [ "$fail" -ne 0 ]; then exit 1; fi
echo "check-deps: ok"
