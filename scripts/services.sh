#!/usr/bin/env bash
# Installs (when missing) and starts the services the test suite needs. Sourced by
# scripts/test.sh; idempotent, so running it twice is cheap.

ensure_services() {
    # Python packages used by the client-compatibility tests.
    python3 -c 'import openai' 2>/dev/null || pip install -q openai
    # pyzmq + msgpack: the libzmq peer of kthena-sim's KV-event interop test; prometheus_client:
    # the reference parser its /metrics conformance test uses.
    python3 -c 'import zmq, msgpack, prometheus_client' 2>/dev/null || pip install -q pyzmq msgpack prometheus_client
    :
}
