#!/usr/bin/env bash
# The CPU one signed `GET /v1/endpoints/{id}` costs each program, and where PostgreSQL's goes:
# runs scripts/bench-pg.sh's `api` scenario (one config) and, over its GET phase only (from the
# harness's progress line for it to the one for the next read), reads from /proc the CPU used by
# webhookd (the harness's children), the harness itself and the run's PostgreSQL server (its
# postmaster, live children, and reaped backends); with PERF=1 it also samples the machine with
# `perf record -e cpu-clock -g` during the phase and reports that server's samples only, by
# library and by symbol. Prints CPU-ms per GET of each program: the terms of the ceiling in
# BENCHMARKS.md ("Signed GET on PostgreSQL: the pair rides with the read").
#
# Usage: scripts/pg-floor-get-perf.sh [OUT_DIR]
# Env: CONFIG (pg1 or sqlite; default pg1), PERF (1: perf too; default 0, as perf's own
#      sampling costs CPU), PERF_SECS (default 8: inside the 10 s phase), WEBHOOKD (the build to
#      run; default this tree's target/release/webhookd, not rebuilt).
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

OUT=${1:-$(mktemp -d /tmp/pg-floor-get-perf.XXXXXX)}
mkdir -p "$OUT"
CONFIG=${CONFIG:-pg1}
PERF=${PERF:-0}
PERF_SECS=${PERF_SECS:-8}
WEBHOOKD=${WEBHOOKD:-target/release/webhookd}
if [ "$PERF" = 1 ]; then
    command -v perf >/dev/null || { echo "pg-floor-get-perf: perf is missing (apt-get install -y linux-perf)" >&2; exit 2; }
fi

BINS="run=$WEBHOOKD" CONFIGS=$CONFIG SCENARIOS=api BUILD=0 \
    scripts/bench-pg.sh "$OUT/bench" >"$OUT/bench.txt" 2>"$OUT/bench.err" &
pid_run=$!
# The run's server: the port bench-pg.sh announces, then the postmaster listening on it.
port=
while [ -z "$port" ] && kill -0 "$pid_run" 2>/dev/null; do
    port=$(sed -n 's/^== PostgreSQL .* on port \([0-9]*\):.*/\1/p' "$OUT/bench.err")
    sleep 0.2
done
[ -n "$port" ] || { echo "pg-floor-get-perf: bench-pg.sh did not start its server" >&2; cat "$OUT/bench.err" >&2; wait "$pid_run" || true; exit 1; }
pgpid=$(grep -lx "$port" /tmp/webhookd-bench-pg.*/data/postmaster.pid | head -1 | xargs head -1)
log=$OUT/bench/run-$CONFIG-api.log

# CPU-seconds so far of: webhookd (the harness's children), the harness, the server.
snapshot() {
    python3 - "$1" "$pgpid" <<'PY'
import os, sys
bench, pg = sys.argv[1], sys.argv[2]
tck = os.sysconf("SC_CLK_TCK")
stats = {}
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            with open(f"/proc/{pid}/stat") as f:
                stats[pid] = f.read().rsplit(")", 1)[1].split()
        except OSError:
            pass
own = lambda f: int(f[11]) + int(f[12])        # utime stime
reaped = lambda f: int(f[13]) + int(f[14])     # cutime cstime
webhookd = sum(own(f) for p, f in stats.items() if f[1] == bench)
harness = own(stats[bench]) if bench in stats else 0
server = own(stats[pg]) + reaped(stats[pg]) + sum(own(f) for p, f in stats.items() if f[1] == pg)
print(webhookd / tck, harness / tck, server / tck)
PY
}

until grep -qs "GET /v1/endpoints/" "$log"; do
    kill -0 "$pid_run" 2>/dev/null || { echo "pg-floor-get-perf: the run ended before its GET phase" >&2; exit 1; }
    sleep 0.05
done
bench=$(pgrep -n -x bench -P "$pid_run")
cpu0=$(snapshot "$bench")
load=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$PERF" = 1 ]; then
    sleep 1
    perf record -q -e cpu-clock -g -a -o "$OUT/perf.data" -- sleep "$PERF_SECS" 2>"$OUT/perf.err"
    ps -o pid= --ppid "$pgpid" | tr -d ' ' >"$OUT/backends"
fi
until grep -qs "GET /v1/tasks" "$log"; do
    kill -0 "$pid_run" 2>/dev/null || break
    sleep 0.05
done
cpu1=$(snapshot "$bench")
wait "$pid_run" || true
cat "$OUT/bench.txt"
gets=$(jq -s 'last | .get_endpoint_per_s * .duration_s' "$OUT/bench/run-$CONFIG-api.json")
python3 - "$cpu0" "$cpu1" "$gets" "$CONFIG" "$load" <<'PY'
import sys
c0, c1 = map(float, sys.argv[1].split()), map(float, sys.argv[2].split())
d = [b - a for a, b in zip(c0, c1)]
gets, config, load = float(sys.argv[3]), sys.argv[4], sys.argv[5]
print(f"\n| config | GETs in the phase | CPU-ms per GET: webhookd / harness / postgres | sum | load average |")
print("|---|---|---|---|---|")
per = [1000 * x / gets for x in d]
print(f"| {config} | {gets:,.0f} | {per[0]:.3f} / {per[1]:.3f} / {per[2]:.3f} | {sum(per):.3f} | {load} |")
PY
if [ "$PERF" = 1 ]; then
    pids=$(sort -u "$OUT/backends" | paste -sd,)
    perf report -i "$OUT/perf.data" --pid "$pids" --no-children --sort dso --stdio -g none \
        2>/dev/null >"$OUT/dsos.txt"
    perf report -i "$OUT/perf.data" --pid "$pids" --no-children --sort symbol --stdio -g none \
        --percent-limit 0.5 2>/dev/null >"$OUT/symbols.txt"
    perf report -i "$OUT/perf.data" --pid "$pids" --children --sort symbol --stdio -g none \
        --percent-limit 2 2>/dev/null >"$OUT/children.txt"
    echo; echo "PostgreSQL's samples by library:"; grep -v '^#' "$OUT/dsos.txt" | grep -v '^$' | head -10
    echo; echo "by symbol (self):"; grep -v '^#' "$OUT/symbols.txt" | grep -v '^$' | head -40
fi
echo "(reports in $OUT)" >&2
