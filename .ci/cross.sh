#!/usr/bin/env bash
# CI step for shipping: installs systemd-analyze for the unit test, then builds the
# aarch64 static binary with scripts/release.sh and smoke-runs it under qemu-aarch64.
# Measured budget: about 10 minutes on a fresh machine (tool installs and a cold build).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v systemd-analyze >/dev/null; then
    echo "== apt-get install systemd (systemd-analyze, for tests/it/packaging.rs)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi
echo "== scripts/release.sh aarch64-unknown-linux-musl (static build, smoke run under qemu)"
start=$(date +%s)
scripts/release.sh aarch64-unknown-linux-musl
echo "== cross build and smoke run took $(( $(date +%s) - start )) s"
