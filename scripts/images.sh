#!/usr/bin/env bash
# The container images (Containerfile), built on this machine without a Docker daemon and
# without a registry: Debian's buildah, as root, with the vfs storage driver and chroot
# isolation.
#
#   scripts/images.sh [build] [OPTIONS] [IMAGE...]
#       Build the images (all four when no IMAGE is named: kthena-router,
#       kthena-controller-manager, kthena, kthena-sim), tagged VERSION and latest.
#         --profile release   build the binaries with `cargo build --release --locked` (default)
#         --profile debug     package the debug binaries already in target/debug (no build)
#         --prefix PREFIX     image name prefix, ending in / (default $KTHENA_IMAGE_PREFIX or kthena-rs/)
#   scripts/images.sh list [--prefix PREFIX]
#       Print the references it builds, one per line (localhost/PREFIXNAME:VERSION).
#   scripts/images.sh rm [--prefix PREFIX]
#       Remove those images (both tags) and any container made from them.
#   scripts/images.sh skeleton SRC DEST
#       Write into DEST the workspace at SRC reduced to its manifests, Cargo.lock, .cargo/
#       and an empty source file for every target: the Containerfile's dependency stage.
#
# The runtime base is assembled from the host's Debian packages (the libraries `ldd` lists
# for the binaries, found with `dpkg -S`, and the CA certificates), the binaries are put in an
# image of their own, and `buildah bud` then runs the Containerfile's final stages with
# RUNTIME_IMAGE and BINARIES pointing at those two: the images carry the Containerfile's
# labels, user and entrypoint. Binaries are stripped of debug info (symbols stay), as the
# Containerfile does. Building again replaces the images (idempotent). Environment:
# CARGO_TARGET_DIR (where the binaries are), KTHENA_IMAGE_PREFIX.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# image name -> binary name, and the package that builds it.
IMAGES=(kthena-router kthena-controller-manager kthena kthena-sim)
declare -A BINARY=([kthena-router]=kthena-router [kthena-controller-manager]=kthena-controller
    [kthena]=kthena [kthena-sim]=kthena-sim)
PACKAGES=(-p kthena-router -p kthena-controller -p kthena-cli -p kthena-sim)
BUILDAH=(buildah --storage-driver vfs)
# The Containerfile's runtime user.
NONROOT_UID=65532

log() { echo "images: $*" >&2; }
die() { log "error: $*"; exit 1; }

workspace_version() {
    awk '/^\[/{s=($0=="[workspace.package]")} s && $1=="version"{gsub(/"/,"",$3); print $3; exit}' \
        "$ROOT/Cargo.toml"
}

# --- skeleton ------------------------------------------------------------------------------

cmd_skeleton() { # SRC DEST
    local src="${1:?skeleton SRC DEST}" dest="${2:?skeleton SRC DEST}" kind path rel
    src="$(cd "$src" && pwd)"
    mkdir -p "$dest"
    cp "$src/Cargo.toml" "$src/Cargo.lock" "$dest/"
    [[ -d "$src/.cargo" ]] && cp -r "$src/.cargo" "$dest/"
    # Every package's manifest and every target's root file, as Cargo itself lists them.
    cargo metadata --no-deps --offline --format-version 1 --manifest-path "$src/Cargo.toml" \
        | grep -o '"manifest_path":"[^"]*"\|"kind":\["[a-z-]*"\],"crate_types":\[[^]]*\],"name":"[^"]*","src_path":"[^"]*"' \
        | while IFS= read -r item; do
            path="${item##*\":\"}" && path="${path%\"}"
            rel="${path#"$src"/}"
            [[ "$rel" != "$path" ]] || die "$path is outside $src"
            mkdir -p "$dest/$(dirname "$rel")"
            case "$item" in
                \"manifest_path\"*) cp "$path" "$dest/$rel" ;;
                *) kind="${item#\"kind\":[\"}" && kind="${kind%%\"*}"
                   case "$kind" in
                       lib | rlib | proc-macro) echo '//! Placeholder.' >"$dest/$rel" ;;
                       *) printf '//! Placeholder.\nfn main() {}\n' >"$dest/$rel" ;;
                   esac ;;
            esac
        done
    log "skeleton of $src written to $dest"
}

# --- the runtime base from the host's packages -----------------------------------------------

# Copies host file PATH into ROOTFS at the same path, resolving symlinked directories the way
# the host does (Debian's merged /usr: /lib -> usr/lib, /lib64 -> usr/lib64).
copy_host_path() { # ROOTFS PATH
    local rootfs="$1" path="$2" real top dir
    real="$(readlink -f "$path")"
    mkdir -p "$rootfs$(dirname "$real")"
    cp -p "$real" "$rootfs$real"
    top="/$(cut -d/ -f2 <<<"$path")"
    if [[ -L "$top" && ! -e "$rootfs$top" ]]; then
        ln -s "$(readlink "$top")" "$rootfs$top"
    fi
    dir="$(readlink -f "$(dirname "$path")")"
    if [[ "$dir/$(basename "$path")" != "$real" ]]; then
        mkdir -p "$rootfs$dir"
        ln -sfn "$real" "$rootfs$dir/$(basename "$path")"
    fi
}

# The Debian package (without its architecture) that installed PATH.
owning_package() {
    local owner
    owner="$(dpkg -S "$1" 2>/dev/null | head -1)" || true
    [[ -n "$owner" ]] || die "no Debian package owns $1 (dpkg -S)"
    owner="${owner%%: *}"
    echo "${owner%%:*}"
}

# Records PACKAGE in ROOTFS as distroless images do (status.d entry, copyright), so that
# image scanners see what the base holds.
record_package() { # ROOTFS PACKAGE
    local rootfs="$1" pkg="$2" copyright
    dpkg -L "$pkg" >/dev/null 2>&1 || die "package $pkg is not installed (dpkg -L $pkg)"
    mkdir -p "$rootfs/var/lib/dpkg/status.d" "$rootfs/usr/share/doc/$pkg"
    dpkg -s "$pkg" >"$rootfs/var/lib/dpkg/status.d/$pkg"
    copyright="$(readlink -f "/usr/share/doc/$pkg/copyright" || true)"
    [[ -f "$copyright" ]] && cp "$copyright" "$rootfs/usr/share/doc/$pkg/copyright"
    return 0
}

# The shared libraries the binaries load, as `ldd` resolves them on this host.
shared_libraries() { # BINARY...
    local bin
    for bin in "$@"; do
        ldd "$bin" | awk '$2=="=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
    done | sort -u
}

write_system_files() { # ROOTFS
    local rootfs="$1"
    mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/tmp" "$rootfs/home/nonroot" "$rootfs/usr/local/bin"
    chmod 1777 "$rootfs/tmp"
    cat >"$rootfs/etc/passwd" <<EOF
root:x:0:0:root:/root:/sbin/nologin
nonroot:x:$NONROOT_UID:$NONROOT_UID:nonroot:/home/nonroot:/sbin/nologin
EOF
    printf 'root:x:0:\nnonroot:x:%s:\n' "$NONROOT_UID" >"$rootfs/etc/group"
    printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
    # The bundle update-ca-certificates generates from the ca-certificates package.
    [[ -s /etc/ssl/certs/ca-certificates.crt ]] \
        || die "/etc/ssl/certs/ca-certificates.crt is missing (apt-get install ca-certificates)"
    cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
    record_package "$rootfs" ca-certificates
    copy_host_path "$rootfs" /etc/os-release
}

build_runtime_image() { # WORKDIR REF BINARY...
    local work="$1" ref="$2" rootfs="$1/rootfs" lib ctr
    shift 2
    rm -rf "$rootfs" && mkdir -p "$rootfs"
    write_system_files "$rootfs"
    for lib in $(shared_libraries "$@"); do
        copy_host_path "$rootfs" "$lib"
        record_package "$rootfs" "$(owning_package "$lib")"
    done
    ctr="$("${BUILDAH[@]}" from scratch)"
    CONTAINERS+=("$ctr")
    "${BUILDAH[@]}" copy --quiet "$ctr" "$rootfs" / >/dev/null
    # The contents of /home, that is /home/nonroot itself, belong to the nonroot user.
    "${BUILDAH[@]}" copy --quiet --chown "$NONROOT_UID:$NONROOT_UID" "$ctr" "$rootfs/home" /home \
        >/dev/null
    "${BUILDAH[@]}" config --os linux --arch "$(go_arch)" --user "$NONROOT_UID:$NONROOT_UID" \
        --env PATH=/usr/local/bin:/usr/bin:/bin --workingdir /home/nonroot "$ctr"
    "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$ref" >/dev/null
    CONTAINERS=()
}

# The architecture as OCI names it.
go_arch() {
    case "$(uname -m)" in
        x86_64) echo amd64 ;; aarch64) echo arm64 ;; *) uname -m ;;
    esac
}

# --- binaries ------------------------------------------------------------------------------

# Builds (release) or finds (debug) the binaries and writes them, stripped, to OUT.
stage_binaries() { # PROFILE OUT
    local profile="$1" out="$2" dir name bin
    local target="${CARGO_TARGET_DIR:-$ROOT/target}"
    case "$profile" in
        release)
            log "cargo build --release --locked (${PACKAGES[*]})"
            (cd "$ROOT" && cargo build --release --locked --bins "${PACKAGES[@]}")
            dir="$target/release" ;;
        debug) dir="$target/debug" ;;
        *) die "unknown profile '$profile' (release or debug)" ;;
    esac
    rm -rf "$out" && mkdir -p "$out"
    for name in "${SELECTED[@]}"; do
        bin="${BINARY[$name]}"
        [[ -x "$dir/$bin" ]] || die "$dir/$bin is missing: build it first \
(cargo build --all-features --bins ${PACKAGES[*]}) or use --profile release"
        strip --strip-debug -o "$out/$bin" "$dir/$bin"
    done
    echo "$dir"
}

build_binaries_image() { # OUT REF
    local ctr
    ctr="$("${BUILDAH[@]}" from scratch)"
    CONTAINERS+=("$ctr")
    "${BUILDAH[@]}" copy --quiet "$ctr" "$1" /out >/dev/null
    "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$2" >/dev/null
    CONTAINERS=()
}

# --- images --------------------------------------------------------------------------------

# The full reference buildah gives PREFIXNAME:TAG (a prefix without a registry is localhost's).
qualify() { # NAME TAG
    local first="${PREFIX%%/*}"
    if [[ "$PREFIX" == */* && ( "$first" == *.* || "$first" == *:* || "$first" == localhost ) ]]; then
        echo "$PREFIX$1:$2"
    else
        echo "localhost/$PREFIX$1:$2"
    fi
}

image_id() { "${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$1" 2>/dev/null || true; }

# Runs the Containerfile's stage NAME over the runtime and binaries images.
build_image() { # NAME RUNTIME BINARIES CONTEXT
    local name="$1" version ref latest old new revision
    version="$(workspace_version)"
    ref="$(qualify "$name" "$version")" latest="$(qualify "$name" latest)"
    revision="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
    old="$(image_id "$ref")"
    "${BUILDAH[@]}" bud --quiet --isolation chroot --pull=never --layers=false \
        -f "$ROOT/Containerfile" --target "$name" \
        --build-arg RUST_IMAGE="$2" --build-arg RUNTIME_IMAGE="$2" --build-arg BINARIES="$3" \
        --build-arg VERSION="$version" --build-arg REVISION="$revision" \
        -t "$ref" -t "$latest" "$4" >/dev/null
    # buildah keeps the containers of stages that only serve `COPY --from`.
    remove_containers_of "$3"
    new="$(image_id "$ref")"
    # The image this one replaces, unless another tag still holds it.
    if [[ -n "$old" && "$old" != "$new" ]]; then
        "${BUILDAH[@]}" rmi "$old" >/dev/null 2>&1 || true
    fi
    log "built $ref (and :latest), $("${BUILDAH[@]}" images --noheading --format '{{.Size}}' "$ref" | head -1)"
}

remove_containers_of() { # IMAGE
    local ctr
    for ctr in $("${BUILDAH[@]}" containers --quiet --filter "ancestor=$1"); do
        "${BUILDAH[@]}" rm "$ctr" >/dev/null
    done
}

cleanup() {
    local ctr ref
    for ctr in "${CONTAINERS[@]}"; do "${BUILDAH[@]}" rm "$ctr" >/dev/null 2>&1 || true; done
    for ref in "${TEMP_IMAGES[@]}"; do "${BUILDAH[@]}" rmi --force "$ref" >/dev/null 2>&1 || true; done
}

preflight() {
    [[ "$(id -u)" == 0 ]] || die "run as root (buildah with the vfs driver and chroot isolation)"
    command -v buildah >/dev/null || die "buildah is not installed (apt-get install buildah)"
    local tool
    for tool in ldd dpkg strip cargo; do
        command -v "$tool" >/dev/null || die "$tool is not installed"
    done
}

cmd_build() {
    preflight
    local version work dir
    version="$(workspace_version)"
    [[ -n "$version" ]] || die "no version in $ROOT/Cargo.toml [workspace.package]"
    work="${CARGO_TARGET_DIR:-$ROOT/target}/images"
    mkdir -p "$work/context"
    # One build at a time in this target directory.
    exec 9>"$work/.lock"
    flock 9
    CONTAINERS=() TEMP_IMAGES=()
    trap cleanup EXIT
    dir="$(stage_binaries "$PROFILE" "$work/out")"
    local runtime binaries
    runtime="$(qualify images-runtime "$$")" binaries="$(qualify images-binaries "$$")"
    TEMP_IMAGES=("$runtime" "$binaries")
    build_runtime_image "$work" "$runtime" "$work"/out/*
    build_binaries_image "$work/out" "$binaries"
    local name
    for name in "${SELECTED[@]}"; do
        build_image "$name" "$runtime" "$binaries" "$work/context"
    done
    log "done: ${#SELECTED[@]} images, version $version, binaries from $dir"
}

cmd_list() {
    local name version
    version="$(workspace_version)"
    for name in "${SELECTED[@]}"; do qualify "$name" "$version"; done
}

cmd_rm() {
    preflight
    local name version
    version="$(workspace_version)"
    for name in "${SELECTED[@]}"; do
        "${BUILDAH[@]}" rmi --force "$(qualify "$name" "$version")" "$(qualify "$name" latest)" \
            >/dev/null 2>&1 || true
    done
    log "removed ${SELECTED[*]} ($PREFIX)"
}

main() {
    local cmd=build
    case "${1:-}" in
        build | list | rm) cmd="$1" && shift ;;
        skeleton) shift && cmd_skeleton "$@" && return ;;
        -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' && return ;;
    esac
    PROFILE=release PREFIX="${KTHENA_IMAGE_PREFIX:-kthena-rs/}" SELECTED=()
    while (($#)); do
        case "$1" in
            --profile) PROFILE="${2:?--profile release|debug}" && shift 2 ;;
            --prefix) PREFIX="${2?--prefix PREFIX}" && shift 2 ;;
            -*) die "unknown option $1 (see --help)" ;;
            *) [[ -n "${BINARY[$1]:-}" ]] || die "unknown image $1 (${IMAGES[*]})"
               SELECTED+=("$1") && shift ;;
        esac
    done
    ((${#SELECTED[@]})) || SELECTED=("${IMAGES[@]}")
    "cmd_$cmd"
}

main "$@"
