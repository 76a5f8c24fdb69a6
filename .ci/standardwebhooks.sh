#!/usr/bin/env bash
# The official Standard Webhooks Python library, for the secret-rotation test
# (tests/it/delivery_controls.rs): a venv at target/venvs/standardwebhooks with it installed
# from PyPI. The test finds it there (or at $WEBHOOKD_STANDARDWEBHOOKS_PYTHON).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/venvs/standardwebhooks
if ! "$venv/bin/python" -c 'import standardwebhooks' 2>/dev/null; then
  echo "== installing the standardwebhooks Python library into $venv"
  if ! python3 -m venv "$venv" 2>/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check standardwebhooks
fi
"$venv/bin/python" -c 'import standardwebhooks; print("standardwebhooks ready")'
