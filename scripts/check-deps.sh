#!/usr/bin/env bash
# Dependency-direction and citation guard.
# - kthena-sched, kthena-kvevents, kthena-tokenize, kthena-openai, kthena-engine-metrics and
#   kthena-autoscale (with their default features; kthena-autoscale's `api` feature adds
#   kthena-api, kthena-kvevents' `subscribe` feature adds zeromq and tokio) must never depend
#   on kube, hyper, tower or tokio: they are leaf crates other proxies and controllers embed.
# - kthena-fuzz (the hot-path fuzz harnesses) must never depend on kube: its parsers are the
#   leaf crates', and the Kubernetes harnesses are kthena-fuzz-k8s's.
# - No library code may use anyhow: binaries, tests and examples may.
# - Sources and docs cite what a reader can open (Go Kthena's files at v1.0.0, its docs, the
#   vLLM, Kubernetes or Gateway API pages), never sections of a document outside the repository.
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
leaf_check kthena-kvevents
leaf_check kthena-tokenize
leaf_check kthena-openai
leaf_check kthena-autoscale
leaf_check kthena-engine-metrics

# The hot-path fuzz harnesses build without Kubernetes. Only kube is checked: kthena-fuzz is
# not a leaf crate that others embed, it just must not pull in kube (nor, with it, the router
# or the controller).
no_kube_check() {
    local pkg=$1
    if ! grep -q "^$pkg " <<<"$members"; then return 0; fi
    local tree
    tree=$(cargo tree -p "$pkg" -e normal --prefix none | awk '{print $1}' | sort -u)
    for bad in kube kube-client kube-core kube-runtime kube-derive; do
        if grep -qx "$bad" <<<"$tree"; then
            echo "check-deps: $pkg depends on $bad (its harnesses must build without Kubernetes)" >&2
            fail=1
        fi
    done
}
no_kube_check kthena-fuzz

# A package may hold a library and a binary; cargo has no binary-only dependencies, so
# check the library's sources: any file under src/ that is not the binary's own (src/main.rs,
# the modules it declares and their submodules, src/bin/) must not use anyhow.
lib_anyhow=$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, os, re, sys
m = json.load(sys.stdin)
for p in m["packages"]:
    libs = [t for t in p["targets"] if "lib" in t["kind"] or "rlib" in t["kind"]]
    if not libs:
        continue
    src = os.path.dirname(libs[0]["src_path"])
    bin_only = set()
    bin_dirs = []
    for t in p["targets"]:
        if "bin" in t["kind"]:
            bin_only.add(os.path.abspath(t["src_path"]))
            with open(t["src_path"]) as f:
                for mod in re.findall(r"^\s*mod\s+(\w+)\s*;", f.read(), re.M):
                    d = os.path.dirname(t["src_path"])
                    bin_only.add(os.path.abspath(os.path.join(d, mod + ".rs")))
                    bin_dirs.append(os.path.abspath(os.path.join(d, mod)))
    for root, _, files in os.walk(src):
        if os.path.join(src, "bin") in root:
            continue
        # Submodules of a binary module (src/foo/*.rs of a mod foo in main.rs).
        if any(os.path.abspath(root) == d or os.path.abspath(root).startswith(d + os.sep) for d in bin_dirs):
            continue
        for name in files:
            path = os.path.abspath(os.path.join(root, name))
            if not name.endswith(".rs") or path in bin_only:
                continue
            with open(path) as f:
                if re.search(r"\banyhow\b", f.read()):
                    print(p["name"], os.path.relpath(path))
')
if [ -n "$lib_anyhow" ]; then
    while read -r pkg file; do
        echo "check-deps: library crate $pkg uses anyhow in $file (use its thiserror Error)" >&2
    done <<<"$lib_anyhow"
    fail=1
fi

# The patterns are written so that they do not match this file itself.
unfollowable=$(grep -rnIiE --exclude-dir=.git --exclude-dir=target \
    -e 'spec[[:space:]]+§' -e 'kthena-spec[.]md' -e 'engines-and-peers[.]md' . || true)
if [ -n "$unfollowable" ]; then
    echo "$unfollowable" >&2
    echo "check-deps: cite a public source (Go Kthena path, docs page), not spec sections" >&2
    fail=1
fi

if [ "$fail" -ne 0 ]; then exit 1; fi
echo "check-deps: ok"
