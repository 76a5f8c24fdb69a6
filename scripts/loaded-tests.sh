#!/usr/bin/env bash
# Runs the whole test suite N times while stress-ng keeps every core busy, to prove the tests
# hold on a loaded machine (they wait on conditions, never on wall-clock budgets).
#
#   scripts/loaded-tests.sh [RUNS] [extra cargo test args…]
#
# Each run's summary lines and the load average go to stdout; the full logs stay in
# target/loaded-tests/run-N.log. Exits non-zero if any run fails.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
shift || true
command -v stress-ng >/dev/null || { echo "stress-ng is missing: apt-get install stress-ng" >&2; exit 2; }
cores=$(nproc)
logs=target/loaded-tests
mkdir -p "$logs"
cargo test --no-run "$@" >/dev/null 2>&1 || cargo test --no-run "$@"
failed=0
for run in $(seq 1 "$runs"); do
    stress-ng --cpu "$cores" --quiet &
    stress=$!
    start=$(date +%s)
    if cargo test "$@" >"$logs/run-$run.log" 2>&1; then verdict=passed; else verdict=FAILED; failed=1; fi
    kill "$stress" 2>/dev/null || true
    wait "$stress" 2>/dev/null || true
    echo "run $run/$runs: $verdict in $(( $(date +%s) - start )) s beside stress-ng --cpu $cores (load: $(cut -d' ' -f1-3 /proc/loadavg))"
    grep -E '^test result|skipped|^failures:|panicked' "$logs/run-$run.log" | sed 's/^/    /'
done
exit "$failed"
