#!/usr/bin/env bash
# Where PostgreSQL's CPU goes, by function (#20): runs scripts/bench-pg.sh's publish1 and api
# scenarios (publish10 too, when asked) on pg1, and over each one's measured phase (publish*:
# the full-rate phase, from its first publish to the last of its deliveries; api: the GET
# phase) samples the machine with
# `perf record -e cpu-clock -F 1000 -g -a` (this VM has no PMU), then reports the run's PostgreSQL
# server's samples (postmaster and children) and, apart, webhookd's: by component (plan,
# executor, index and heap inserts, WAL insert, commit/flush, locks, client I/O, catalog
# caches, set_config, JSON, ...), inclusive shares of the functions that matter, leaf symbols
# (scripts/perf-pg-report.py). A pooled connection serves publishes and rounds alike, so the
# profile does not split by statement: pg_stat_statements does, by time.
#
# Beside the profile, over the same window: pg_stat_statements (calls, mean and total time
# per statement; reset at the window's start), pg_stat_wal's deltas, and the units the CPU is
# divided by: deliveries (rows added to `attempts`) and events for publish*, signed requests
# (rows added to `replay_guard`) for api.
#
# Usage: scripts/profile-pg.sh [OUT_DIR]
# Env: SCENARIOS (default "publish1 api"; publish10 too), WEBHOOKD (build to run; default this tree's
#      target/release/webhookd, not rebuilt), BENCH (harness; default
#      target/release/examples/bench), EVENTS1 (default 20000), PG_CONF_EXTRA (lines for postgresql.conf, as bench-pg.sh's; default
#      "pg_stat_statements.track_planning = on", so that the statements' `plans` column counts
#      how often each was planned in the window: 0 for a generic plan reused, one per call for
#      custom plans; e.g. add "plan_cache_mode = force_custom_plan" to see what custom plans
#      would cost), SQL_BEFORE (SQL run in the run's database as its phase starts, before the
#      window: an experiment on the schema, e.g. "DROP INDEX tasks_app").
# perf's sampling costs CPU: take the rates of a profiled run as no figure.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

OUT=${1:-$(mktemp -d /tmp/profile-pg.XXXXXX)}
mkdir -p "$OUT"
SCENARIOS=${SCENARIOS:-publish1 api}
WEBHOOKD=${WEBHOOKD:-target/release/webhookd}
export PG_CONF_EXTRA=${PG_CONF_EXTRA:-pg_stat_statements.track_planning = on}
command -v perf >/dev/null || { echo "profile-pg: perf is missing (apt-get install -y linux-perf)" >&2; exit 2; }

# The phase's first line in the harness's log, and the line that ends it.
phase_start() { case $1 in publish1) echo "bench: publish: fan-out 1, [0-9]* events from" ;; publish10) echo "bench: publish: fan-out 10, [0-9]* events from" ;; api) echo "GET /v1/endpoints/" ;; esac; }
phase_end() { case $1 in publish*) echo "paced at" ;; api) echo "GET /v1/tasks" ;; esac; }
# The units of the scenario: SQL counting them in the run's database.
units_sql() {
    case $1 in
        publish*) echo "SELECT (SELECT count(*) FROM attempts) || ' ' || (SELECT count(*) FROM events)" ;;
        api) echo "SELECT (SELECT count(*) FROM replay_guard) || ' 0'" ;;
    esac
}

for scenario in $SCENARIOS; do
    dir=$OUT/$scenario
    mkdir -p "$dir"
    echo "== $scenario (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    BINS="run=$WEBHOOKD" CONFIGS=pg1 SCENARIOS=$scenario BUILD=0 \
        scripts/bench-pg.sh "$dir/bench" >"$dir/bench.txt" 2>"$dir/bench.err" &
    pid_run=$!
    trap 'pkill -P "$pid_run" 2>/dev/null; kill "$pid_run" 2>/dev/null' EXIT
    port=
    while [ -z "$port" ] && kill -0 "$pid_run" 2>/dev/null; do
        port=$(sed -n 's/^== PostgreSQL .* on port \([0-9]*\):.*/\1/p' "$dir/bench.err" 2>/dev/null || true)
        sleep 0.2
    done
    [ -n "$port" ] || { echo "profile-pg: bench-pg.sh did not start its server" >&2; cat "$dir/bench.err" >&2; exit 1; }
    # Other servers' folders come and go meanwhile: a file gone under the glob is no error.
    datadir=$(dirname "$({ grep -lxs "$port" /tmp/webhookd-bench-pg.*/data/postmaster.pid || true; } | head -1)")
    pgpid=$(head -1 "$datadir/postmaster.pid")
    sock=$(dirname "$datadir")
    psql_db() { psql -h "$sock" -p "$port" -U webhookd -d "$1" -AtXqc "$2"; }
    log=$dir/bench/run-pg1-$scenario.log
    until grep -qs "$(phase_start "$scenario")" "$log"; do
        kill -0 "$pid_run" 2>/dev/null || { echo "profile-pg: the run ended before its phase" >&2; exit 1; }
        sleep 0.05
    done
    db=$(psql_db bench "SELECT datname FROM pg_database WHERE datname LIKE 'bench\_b%' LIMIT 1")
    [ -n "${SQL_BEFORE:-}" ] && psql_db "$db" "$SQL_BEFORE" >/dev/null
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    psql_db bench "SELECT pg_stat_statements_reset()" >/dev/null
    wal0=$(psql_db "$db" "SELECT wal_records || ' ' || wal_fpi || ' ' || wal_bytes || ' ' || wal_write || ' ' || wal_sync FROM pg_stat_wal")
    units0=$(psql_db "$db" "$(units_sql "$scenario")")
    perf record -q -e cpu-clock -F 1000 -g -a -o "$dir/perf.data" 2>"$dir/perf.err" &
    pid_perf=$!
    t0=$(date +%s.%N)
    until grep -qs "$(phase_end "$scenario")" "$log"; do
        kill -0 "$pid_run" 2>/dev/null || break
        sleep 0.05
    done
    # Sampling stops at the signal; the counts are taken at once, before perf writes its file
    # (the next phase runs meanwhile).
    kill -INT "$pid_perf"
    secs=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
    units1=$(psql_db "$db" "$(units_sql "$scenario")")
    wal1=$(psql_db "$db" "SELECT wal_records || ' ' || wal_fpi || ' ' || wal_bytes || ' ' || wal_write || ' ' || wal_sync FROM pg_stat_wal")
    psql_db bench "SELECT calls, rows, round((total_exec_time / greatest(calls, 1))::numeric, 3), round(total_exec_time::numeric, 1), round(total_plan_time::numeric, 1), plans, wal_records, wal_bytes, left(regexp_replace(query, '\s+', ' ', 'g'), 150) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$db') ORDER BY total_exec_time DESC LIMIT 25" \
        >"$dir/statements" || true
    wait "$pid_perf" || true
    settings=$(psql_db "$db" "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings WHERE name IN ('plan_cache_mode', 'synchronous_commit', 'wal_writer_delay', 'commit_delay')")
    { echo "$pgpid"; ps -o pid= --ppid "$pgpid"; } | tr -d ' ' | sort -u >"$dir/pg.pids"
    # webhookd: the nodes the harness runs, bench-pg.sh's copy of WEBHOOKD.
    pgrep -f "^$dir/bench/bin-run/webhookd " >"$dir/webhookd.pids" || true
    # The harness: the load generator, on the same two cores.
    pgrep -P "$pid_run" -x "$(basename "${BENCH:-bench}" | cut -c1-15)" >"$dir/harness.pids" || true
    wait "$pid_run" || true
    perf script -i "$dir/perf.data" -F comm,pid,tid,ip,sym,dso 2>/dev/null >"$dir/perf.script"
    read -r u0 e0 <<<"$units0"
    read -r u1 e1 <<<"$units1"
    units=$((u1 - u0)) events=$((e1 - e0))
    unit=$([ "$scenario" = api ] && echo "request" || echo "delivery")
    units_name=$([ "$scenario" = api ] && echo "signed requests" || echo "deliveries")
    {
        echo "## $scenario${SQL_BEFORE:+ after \`$SQL_BEFORE\`}: perf over the phase, ${secs} s (load average $load at its start)"
        echo
        echo "$units $units_name$([ "$scenario" != api ] && echo ", $events events") in the window; server settings: $settings"
        echo
        read -r r0 f0 b0 w0 s0 <<<"$wal0"
        read -r r1 f1 b1 w1 s1 <<<"$wal1"
        echo "pg_stat_wal over the window: $((r1 - r0)) records, $((f1 - f0)) full-page images, $((b1 - b0)) bytes, $((w1 - w0)) writes, $((s1 - s0)) syncs; per $unit: $(python3 -c "u=max($units,1); print(f'{($r1-$r0)/u:.2f} records, {($b1-$b0)/u:,.0f} bytes, {($s1-$s0)/u:.3f} syncs')")"
        echo
        python3 scripts/perf-pg-report.py harness "$dir/harness.pids" "$units" "$unit" <"$dir/perf.script"
        echo
        echo "### PostgreSQL"
        echo
        python3 scripts/perf-pg-report.py postgres "$dir/pg.pids" "$units" "$unit" <"$dir/perf.script"
        echo
        echo "### pg_stat_statements over the window (by total time)"
        echo
        echo "| calls | rows | mean ms | total ms | plan ms | plans | WAL records | WAL bytes | statement |"
        echo "|---|---|---|---|---|---|---|---|---|"
        sed 's/^/| /; s/$/ |/; s/|/ | /g; s/^ | /| /' "$dir/statements" | sed 's/  */ /g'
        echo
        echo "### webhookd"
        echo
        python3 scripts/perf-pg-report.py webhookd "$dir/webhookd.pids" "$units" "$unit" <"$dir/perf.script"
    } >"$dir/report.md"
    rm -f "$dir/perf.script"
    cat "$dir/report.md"
    echo
done
echo "(reports in $OUT/*/report.md; perf.data beside them)" >&2
