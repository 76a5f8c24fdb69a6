#!/usr/bin/env bash
# The dashboard's browser test (tests/it/dashboard.rs → tests/browser/dashboard.py): installs
# Debian's chromium and Python playwright (in .venv-ci/, never downloading a browser of its
# own), then runs the test with CI=true so that a missing component fails instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null; then
  echo "== installing chromium (Debian)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
VENV="$PWD/.venv-ci"
if ! "$VENV/bin/python" -c "import playwright.sync_api" 2>/dev/null; then
  echo "== installing playwright (PyPI) into $VENV"
  python3 -m venv "$VENV"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "$VENV/bin/pip" install -q playwright
fi
echo "== dashboard browser test"
if command -v node >/dev/null; then node tests/browser/vectors.mjs && node tests/browser/words.mjs; fi
CI=true WEBHOOKD_BROWSER_PYTHON="$VENV/bin/python" CHROMIUM="$(command -v chromium)" \
  cargo test --test it dashboard -- --nocapture
