#!/usr/bin/env bash
# The container images' test (part of scripts/test.sh): builds every image with
# scripts/images.sh from the debug binaries (the ones the test suite has just built; built here
# when missing), under a test prefix, then for each image checks with buildah: the tags
# (workspace version and latest), the non-root user, the entrypoint, the OCI labels, and runs
# the entrypoint with --version inside the image, expecting "BINARY VERSION". Also checks the
# Containerfile's dependency stage (the skeleton loads with Cargo.lock unchanged), that the
# Containerfile's default VERSION is the workspace version, and that a second build replaces
# the images without leaving any behind. Removes its images at the end. Needs root and buildah.
set -euo pipefail
cd "$(dirname "$0")/.."

PREFIX="kthena-rs-test/"
BUILDAH=(buildah --storage-driver vfs)
declare -A BINARY=([kthena-router]=kthena-router [kthena-controller-manager]=kthena-controller
    [kthena]=kthena [kthena-sim]=kthena-sim)
IMAGES=(kthena-router kthena-controller-manager kthena kthena-sim)
start=$(date +%s)
checks=0

fail() { echo "images-test: FAIL: $*" >&2; exit 1; }
expect() { # WHAT ACTUAL EXPECTED
    [[ "$2" == "$3" ]] || fail "$1: got '$2', expected '$3'"
    checks=$((checks + 1))
}
inspect() { "${BUILDAH[@]}" inspect --type image --format "$2" "$1"; }

command -v buildah >/dev/null || fail "buildah is not installed (apt-get install buildah)"
version="$(awk '/^\[/{s=($0=="[workspace.package]")} s && $1=="version"{gsub(/"/,"",$3); print $3; exit}' Cargo.toml)"
[[ -n "$version" ]] || fail "no workspace version in Cargo.toml"

# The Containerfile's defaults and dependency stage.
expect "Containerfile ARG VERSION" "$(sed -n 's/^ARG VERSION=//p' Containerfile)" "$version"
skeleton="$(mktemp -d)"
trap 'rm -rf "$skeleton"; bash scripts/images.sh rm --prefix "$PREFIX" >/dev/null 2>&1 || true' EXIT
bash scripts/images.sh skeleton . "$skeleton" 2>/dev/null
cargo metadata --locked --format-version 1 --manifest-path "$skeleton/Cargo.toml" \
    >/dev/null || fail "the skeleton's workspace does not load with Cargo.lock unchanged"
expect "skeleton Cargo.lock" "$(cmp -s Cargo.lock "$skeleton/Cargo.lock" && echo same)" same

# Clear errors: an unknown image, and debug binaries that were never built.
expect "unknown image" "$(bash scripts/images.sh kthena-nope 2>&1 || true)" \
    "images: error: unknown image kthena-nope (kthena-router kthena-controller-manager kthena kthena-sim)"
expect "missing binary" "$(CARGO_TARGET_DIR="$skeleton/target" bash scripts/images.sh --profile debug kthena 2>&1 \
    | tail -1 || true)" "images: error: $skeleton/target/debug/kthena is missing: build it first \
(cargo build --all-features --bins -p kthena-router -p kthena-controller -p kthena-cli -p kthena-sim) or use --profile release"

# The debug binaries (the test suite builds them for the integration tests).
target="${CARGO_TARGET_DIR:-target}/debug"
for name in "${IMAGES[@]}"; do
    if [[ ! -x "$target/${BINARY[$name]}" ]]; then
        cargo build --locked --all-features --bins \
            -p kthena-router -p kthena-controller -p kthena-cli -p kthena-sim
        break
    fi
done

build_start=$(date +%s)
bash scripts/images.sh --profile debug --prefix "$PREFIX"
build_secs=$(($(date +%s) - build_start))

check_image() { # NAME
    local name="$1" bin="${BINARY[$1]}" ref="localhost/$PREFIX$1:$version" ctr out
    expect "$name: latest tag" "$(inspect "localhost/$PREFIX$name:latest" '{{.FromImageID}}')" \
        "$(inspect "$ref" '{{.FromImageID}}')"
    expect "$name: user" "$(inspect "$ref" '{{.OCIv1.Config.User}}')" "65532:65532"
    expect "$name: entrypoint" \
        "$(inspect "$ref" '{{range .OCIv1.Config.Entrypoint}}<{{.}}>{{end}}')" "</usr/local/bin/$bin>"
    expect "$name: cmd" "$(inspect "$ref" '{{range .OCIv1.Config.Cmd}}<{{.}}>{{end}}')" ""
    expect "$name: version label" \
        "$(inspect "$ref" '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}')" "$version"
    expect "$name: title label" \
        "$(inspect "$ref" '{{index .OCIv1.Config.Labels "org.opencontainers.image.title"}}')" "$name"
    expect "$name: licenses label" \
        "$(inspect "$ref" '{{index .OCIv1.Config.Labels "org.opencontainers.image.licenses"}}')" "Apache-2.0"
    ctr="$("${BUILDAH[@]}" from --pull-never "$ref")"
    out="$("${BUILDAH[@]}" run --isolation chroot "$ctr" -- "/usr/local/bin/$bin" --version 2>&1)" \
        || { "${BUILDAH[@]}" rm "$ctr" >/dev/null; fail "$name: $bin --version failed: $out"; }
    "${BUILDAH[@]}" rm "$ctr" >/dev/null
    expect "$name: $bin --version in the image" "$out" "$bin $version"
}

# The runtime base every image shares, read from the router image's file system.
check_runtime_files() { # REF
    local ctr root
    ctr="$("${BUILDAH[@]}" from --pull-never "$1")"
    root="$("${BUILDAH[@]}" mount "$ctr")"
    expect "CA bundle" "$(cmp -s /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt" \
        && echo same)" same
    expect "/tmp mode" "$(stat -c %a "$root/tmp")" 1777
    expect "/home/nonroot owner" "$(stat -c %u:%g "$root/home/nonroot")" "65532:65532"
    expect "passwd nonroot" "$(grep '^nonroot:' "$root/etc/passwd")" \
        "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin"
    expect "packages recorded" "$(ls "$root/var/lib/dpkg/status.d" | tr '\n' ' ')" \
        "ca-certificates libc6 libgcc-s1 "
    expect "no shell" "$([[ -e "$root/bin/sh" ]] && echo present || echo absent)" absent
    "${BUILDAH[@]}" umount "$ctr" >/dev/null
    "${BUILDAH[@]}" rm "$ctr" >/dev/null
}

for name in "${IMAGES[@]}"; do check_image "$name"; done
check_runtime_files "localhost/${PREFIX}kthena-router:$version"

# Building again replaces the images: still one image (two tags) per name, no container left.
dangling() { "${BUILDAH[@]}" images --noheading --filter dangling=true --format '{{.ID}}' | wc -l; }
dangling_before="$(dangling)"
first_id="$(inspect "localhost/${PREFIX}kthena:$version" '{{.FromImageID}}')"
bash scripts/images.sh --profile debug --prefix "$PREFIX" kthena 2>/dev/null
[[ "$(inspect "localhost/${PREFIX}kthena:$version" '{{.FromImageID}}')" != "$first_id" ]] \
    || fail "the second build did not produce a new image"
expect "images under $PREFIX after a rebuild" \
    "$("${BUILDAH[@]}" images --noheading --format '{{.Name}}:{{.Tag}}' | grep -c "/$PREFIX")" 8
expect "untagged images after a rebuild" "$(dangling)" "$dangling_before"
expect "working containers left of $PREFIX images" \
    "$("${BUILDAH[@]}" containers --format '{{.ImageName}}' | grep -c "/$PREFIX" || true)" 0

sizes="$("${BUILDAH[@]}" images --noheading --format '{{.Name}}:{{.Tag}} {{.Size}}' \
    | awk -v p="localhost/$PREFIX" -v v=":$version" 'index($1, p) == 1 && $1 ~ v "$" {
        sub(p, "", $1); sub(v "$", "", $1); printf "%s%s %s %s", sep, $1, $2, $3; sep = ", " }')"
echo "images-test: ok: $checks checks, ${#IMAGES[@]} images built in ${build_secs}s ($sizes)," \
    "total $(($(date +%s) - start))s"
