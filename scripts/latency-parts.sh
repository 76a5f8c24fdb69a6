#!/usr/bin/env bash
# Takes the publish→delivery latency of `bench publish` apart on PostgreSQL: each delivery's
# time from the publish's send to its event's `created_at` (HTTP, auth, the wait for a
# connection; the handler's clock), from `created_at` to its first attempt's `started_at`
# (the publish's commit, the notice or the round that finds the task, the claim, the hand-out
# to a sender) and from `started_at` to its arrival at the receiver (the send). One private
# server (scripts/pg-server.sh, as bench-pg.sh makes it); the harness keeps its database
# (WEBHOOKD_BENCH_KEEP_DB) and writes each delivery's send and arrival times
# (WEBHOOKD_BENCH_TIMINGS); scripts/latency-parts.py joins the two and prints the percentiles
# of each part, for each phase (full rate, half rate), and the parts of the slowest 1%. Kept
# in OUT: per run the harness's JSON and log, the two inputs, every process's CPU each second
# (pidstat), and the server's log.
#
#   scripts/latency-parts.sh [OUT_DIR]
#   Env: CONFIGS ("pg1 pg3"), FANOUT (10), EVENTS (5000), ROUNDS (1), BENCH (the harness,
#        default target/release/examples/bench), BENCH_ARGS (e.g. "--rate 200").
# Needs the harness built: cargo build --release --example bench.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C
OUT=${1:-$(mktemp -d /tmp/latency-parts.XXXXXX)}
mkdir -p "$OUT"
BENCH=${BENCH:-target/release/examples/bench}
# The server's log (its checkpoints, with their times) stays in OUT.
PG_KEEP_LOG=$OUT/server.log
# shellcheck source=scripts/pg-server.sh
source scripts/pg-server.sh
pg_server_start
for round in $(seq 1 "${ROUNDS:-1}"); do
    for config in ${CONFIGS:-pg1 pg3}; do
        name=$config-f${FANOUT:-10}-r$round
        echo "== $name (load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%T.%N | cut -c1-12) UTC)" >&2
        rm -f "$OUT/$name.timings"
        # Every process's CPU each second (what else ran while a phase was slow).
        pidstat -u -h 1 >"$OUT/$name.pidstat" 2>/dev/null &
        pid_pidstat=$!
        # shellcheck disable=SC2086 # BENCH_ARGS is a list of words
        WEBHOOKD_BENCH_KEEP_DB=1 WEBHOOKD_BENCH_TIMINGS="$OUT/$name.timings" "$BENCH" publish \
            --fanout "${FANOUT:-10}" --events "${EVENTS:-5000}" --db "$URL" --nodes "${config#pg}" \
            ${BENCH_ARGS:-} --json >"$OUT/$name.json" 2>"$OUT/$name.log"
        kill "$pid_pidstat" 2>/dev/null || true
        db=$(sed -n 's/^bench: database \(.*\) kept.*/\1/p' "$OUT/$name.log" | tail -1)
        "${RUN[@]}" "$PGBIN/psql" -h "$PGDIR" -p "$PORT" -U webhookd -d "$db" -AtXF' ' -c \
            "SELECT t.id, e.created_at, a.started_at, a.duration_ms
               FROM tasks t JOIN events e ON e.id = t.event_id
               JOIN attempts a ON a.task_id = t.id AND a.attempt = 1" >"$OUT/$name.tasks"
        "${RUN[@]}" "$PGBIN/psql" -h "$PGDIR" -p "$PORT" -U webhookd -d postgres -qc \
            "DROP DATABASE \"$db\" WITH (FORCE)"
        python3 scripts/latency-parts.py "$OUT/$name.timings" "$OUT/$name.tasks" | tee "$OUT/$name.parts"
    done
done
