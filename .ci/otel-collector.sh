#!/usr/bin/env bash
# A real OpenTelemetry collector for the OTLP export test (tests/it/traces.rs,
# `a_real_collector_shows_one_trace_from_publish_to_last_attempt`): Rotel, a collector written
# in Rust whose PyPI wheel ships its binary (`rotel-agent`), in a venv at target/venvs/rotel.
# Neither the OpenTelemetry Collector (otelcol) nor Jaeger installs from Debian, PyPI, npm or
# crates.io; Rotel does. The test finds it there (or at $WEBHOOKD_OTEL_COLLECTOR).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/venvs/rotel
agent() { ls "$venv"/lib/python3*/site-packages/rotel/rotel-agent 2>/dev/null | head -n 1; }
if [ -z "$(agent)" ]; then
  echo "== installing the Rotel OpenTelemetry collector (PyPI: rotel) into $venv"
  if ! python3 -m venv "$venv" 2>/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check "rotel==0.0.1a15"
fi
"$(agent)" --version
