#!/usr/bin/env bash
# The schedules scenario with --fill (100,000 by default) on SQLite, and the CPU time the
# server's scheduler thread used over the CPU_SECS (20) seconds after the minute, read from
# /proc/<pid>/task/<tid>/stat: on a loaded machine the wall-clock figures move a lot from run
# to run, the scheduler's CPU much less (BENCHMARKS.md, "Firing schedules: multi-row
# statements on SQLite"). Run binaries in turn (A, B, A, B, …) for an A/B.
#
# Usage: scripts/bench-firing-cpu.sh full|normal OUT_PREFIX BINARY
# Env: COUNT (schedules, default 100000), CPU_SECS (20). Needs target/release/examples/bench.
set -euo pipefail
cd "$(dirname "$0")/.."
SYNC=$1 OUT=$2 BIN=$3
WEBHOOKD_SQLITE_SYNC=$SYNC timeout 300 target/release/examples/bench schedules \
    --schedules "${COUNT:-100000}" --fill --spawn --binary "$BIN" --json >"$OUT.json" 2>"$OUT.err" &
BENCH_PID=$!
until grep -q "waiting .* for the minute" "$OUT.err" 2>/dev/null; do
    sleep 0.2
    kill -0 "$BENCH_PID" 2>/dev/null || { echo "bench-firing-cpu: the harness stopped: $OUT.err" >&2; exit 1; }
done
SERVER=$(pgrep -f "^$BIN" | head -1)
# CPU ticks (user + system) of the server's thread named $1.
ticks() {
    for t in /proc/"$SERVER"/task/*; do
        [ "$(cat "$t/comm" 2>/dev/null)" = "$1" ] && awk '{print $14 + $15}' "$t/stat"
    done | head -1
}
WAIT=$(grep -o "waiting [0-9.]* s for the minute" "$OUT.err" | awk '{print $2}')
sleep "$(echo "$WAIT - 1" | bc)"
before=$(ticks webhookd-schedu)
LOAD=$(uptime | sed 's/.*load average: //')
sleep "${CPU_SECS:-20}"
after=$(ticks webhookd-schedu)
wait "$BENCH_PID"
echo "$(basename "$BIN") $SYNC load [$LOAD] scheduler_cpu_s $(echo "scale=2; ($after - $before) / $(getconf CLK_TCK)" | bc)" \
    "[all_created_s, all_delivered_s, received, duplicates] $(jq -c '[.all_created_after_s, .all_delivered_after_s, .deliveries_received, .duplicates]' "$OUT.json")"
