#!/usr/bin/env bash
# Installs (when missing) and starts the services the test suite needs. Sourced by
# scripts/test.sh; idempotent, so running it twice is cheap.

ensure_services() {
    # Python packages used by the client-compatibility tests.
    :
}
