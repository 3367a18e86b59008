#!/usr/bin/env bash
# Helm (v4), built from its Go module once per machine, for the chart tests and the laptop
# install (charts/kthena).
#
#   scripts/helm.sh build    build helm into $KTHENA_HELM_CACHE/$HELM_VERSION/helm
#                            (default /var/cache/kthena/helm); idempotent, one build at a time
#   scripts/helm.sh path     print the binary's path (whether or not it is built yet)
#
# The version is pinned by the wrapper module scripts/k8s/helm (go.mod + go.sum, a `tool`
# directive and no Go source), as scripts/kube-env.sh pins kube-apiserver. Go is needed only
# for `build`.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HELM_VERSION="v4.3.2"
CACHE="${KTHENA_HELM_CACHE:-/var/cache/kthena/helm}"
BIN="$CACHE/$HELM_VERSION/helm"

log() { echo "helm.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

built() {
    [[ -x "$BIN" ]] && "$BIN" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"
}

cmd_build() {
    if built; then
        log "already built: $BIN"
        return 0
    fi
    command -v go >/dev/null || die "go is needed to build helm (once per machine)"
    mkdir -p "$CACHE/$HELM_VERSION"
    # One build at a time: a second caller waits for the first, then finds it done.
    exec 9>"$CACHE/.build.lock"
    flock 9
    if built; then
        return 0
    fi
    local start=$SECONDS
    log "building helm $HELM_VERSION from helm.sh/helm/v4/cmd/helm"
    (cd "$ROOT/scripts/k8s/helm" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false \
        go build -mod=readonly -trimpath \
        -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
        -o "$BIN.tmp" helm.sh/helm/v4/cmd/helm)
    mv -f "$BIN.tmp" "$BIN"
    built || die "the built helm does not report $HELM_VERSION"
    log "built in $((SECONDS - start))s: $BIN"
}

case "${1:-}" in
    build) cmd_build ;;
    path) echo "$BIN" ;;
    *) die "usage: $0 build|path" ;;
esac
