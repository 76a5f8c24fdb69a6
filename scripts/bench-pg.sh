#!/usr/bin/env bash
# Issue #13's benchmark matrix: SQLite beside PostgreSQL with 1 and 3 nodes, on this machine.
#
# Starts a private, tuned PostgreSQL server (scripts/pg-server.sh: initdb on a temp folder, a
# free loopback port; as the `postgres` user when run as root), builds the release binary and
# harness, and runs publish (fan-out 1 and 10), api (signed GETs) and schedules (10,000 on one
# minute) for:
#   sqlite  one `webhookd serve` process on a temporary SQLite file (--spawn: a real process,
#           like the PostgreSQL nodes, so the two stores compare on equal terms)
#   pg1     one node on a fresh PostgreSQL database
#   pg3     three nodes on one fresh PostgreSQL database, the load spread round robin
# Each run is sampled with pidstat (CPU of webhookd, postgres, the harness) and mpstat (the
# whole machine: what else was running). Prints one table; raw JSON and samples stay in OUT.
#
# Durability: fsync=on, full_page_writes=on, synchronous_commit=on (PostgreSQL's default: a
# commit waits for its WAL flush). SQLite runs with webhookd's default, `--sqlite-sync full`
# (a write is acknowledged after its group commit's fsync), the comparable setting; with
# WEBHOOKD_SQLITE_SYNC=normal in the environment it does not wait for the fsync, and SYNC=off
# runs PostgreSQL to match (synchronous_commit=off: a crash may lose the last commits, never
# corrupts). Another build is best given with BINS (below): it is copied under the name
# `webhookd`, which pidstat's CPU columns look for.
#
# Usage: scripts/bench-pg.sh [OUT_DIR]
# Env: CONFIGS="sqlite pg1 pg3", SCENARIOS="publish1 publish10 api schedules",
#      EVENTS1 (fan-out 1 events, default 20000), EVENTS10 (default 5000), API_SECS (10),
#      SCHEDULES (10000), SYNC (on), WORKERS (webhookd's default when unset),
#      BENCH_ARGS (more harness arguments for every run: `--binary PATH` runs another build
#      for an A/B, `--fill` fills the schedules straight into the database),
#      PG_CONF_EXTRA (lines appended to the server's postgresql.conf, e.g. autovacuum settings, or
#      "wal_writer_delay = 10ms" as docs/operations.md advises: left at the default here so the
#      figures compare with earlier runs),
#      ROUNDTRIPS=1 (PostgreSQL configs through scripts/pg-roundtrips.py, which counts the
#      round trips; slower, so its rates are not comparable),
#      BINS="main=/tmp/webhookd-main new=target/release/webhookd" (A/B: each run is made with
#      each binary in turn, interleaved, on the same PostgreSQL server; default: this tree's
#      build only), ROUNDS (default 1): every run repeated, the table shows medians,
#      BUILD=0 (use target/release/examples/bench as it is; with BINS, nothing is built),
#      BENCH (another harness binary than target/release/examples/bench, e.g. main's).
# Counts per run (docs/scaling.md): WAL bytes (pg_current_wal_lsn before and after), statements
# (pg_stat_statements), transactions and peak connections of the run's database (sampled).
set -euo pipefail
cd "$(dirname "$0")/.."
# 24-hour times in the samples, whatever the locale.
export LC_ALL=C S_TIME_FORMAT=ISO

OUT=${1:-$(mktemp -d /tmp/bench-pg.XXXXXX)}
mkdir -p "$OUT"
CONFIGS=${CONFIGS:-sqlite pg1 pg3}
SCENARIOS=${SCENARIOS:-publish1 publish10 api schedules}
EVENTS1=${EVENTS1:-20000}
EVENTS10=${EVENTS10:-5000}
API_SECS=${API_SECS:-10}
SCHEDULES=${SCHEDULES:-10000}
SYNC=${SYNC:-on}

for tool in pidstat mpstat jq; do
    command -v "$tool" >/dev/null || { echo "bench-pg: $tool is missing (apt-get install -y sysstat jq)" >&2; exit 2; }
done
# shellcheck source=scripts/pg-server.sh
source scripts/pg-server.sh
[ -x "$PGBIN/initdb" ] || { echo "bench-pg: no PostgreSQL server (apt-get install -y postgresql)" >&2; exit 2; }

if [ "${BUILD:-1}" = 1 ]; then
    echo "== building the release binary and harness" >&2
    cargo build --release --bin webhookd --example bench >&2
fi
BENCH=${BENCH:-$PWD/target/release/examples/bench}
ROUNDS=${ROUNDS:-1}
BINS=${BINS:-}
# Each binary as OUT/bin-LABEL/webhookd (the process keeps its name for pidstat); the harness
# runs the one WEBHOOKD_BENCH_BINARY names instead of building its own.
LABELS=()
for bin in $BINS; do
    label=${bin%%=*} path=${bin#*=}
    [ -x "$path" ] || { echo "bench-pg: no binary at $path" >&2; exit 2; }
    mkdir -p "$OUT/bin-$label"
    cp "$path" "$OUT/bin-$label/webhookd"
    LABELS+=("$label")
done
[ ${#LABELS[@]} -gt 0 ] || LABELS=(-)

PG_KEEP_LOG=$OUT/server.log
pg_server_start
# The run's own database is the one the harness makes: bench_b<pid>_<n>.
RUN_DB="datname LIKE 'bench\_b%'"
# Checkpoints and buffer writes, before and after each PostgreSQL run (OUT/NAME.bgwriter).
BGWRITER="checkpoints_timed, checkpoints_req, buffers_checkpoint, buffers_clean, buffers_backend, buffers_backend_fsync, (SELECT wal_records || ' ' || wal_fpi || ' ' || wal_bytes || ' ' || wal_write || ' ' || wal_sync FROM pg_stat_wal) FROM pg_stat_bgwriter"
if [ "${ROUNDTRIPS:-0}" = 1 ]; then
    PROXY_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    python3 scripts/pg-roundtrips.py "$PROXY_PORT" "$PORT" "$OUT/roundtrips.json" &
    PROXY_PID=$!
    trap 'kill $PROXY_PID 2>/dev/null || true; pg_server_stop' EXIT
    sleep 1
    URL="postgres://webhookd:$PASSWORD@127.0.0.1:$PROXY_PORT/bench?sslmode=disable"
fi
echo "== PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') on port $PORT: fsync=on, synchronous_commit=$SYNC" >&2

args_for_config() {
    case $1 in
        sqlite) echo "--spawn" ;;
        pg1) echo "--db $URL --nodes 1" ;;
        pg3) echo "--db $URL --nodes 3" ;;
        *) echo "bench-pg: unknown config $1" >&2; exit 2 ;;
    esac
}
args_for_scenario() {
    case $1 in
        publish1) echo "publish --fanout 1 --events $EVENTS1" ;;
        publish10) echo "publish --fanout 10 --events $EVENTS10" ;;
        api) echo "api --duration $API_SECS" ;;
        schedules) echo "schedules --schedules $SCHEDULES" ;;
        *) echo "bench-pg: unknown scenario $1" >&2; exit 2 ;;
    esac
}

# What the run's connections and the server do, every half second while the harness (pid $1)
# runs, as SQL for one psql session on `bench`; each row tagged with the file it goes to:
# conns/xacts (the run's database: connections, transactions so far), activity (every process
# that is not a client backend: autovacuum workers with the table they vacuum, WAL writer,
# checkpointer; and the databases on the server), waits (the run's client backends by state and
# wait event: Lock/LWLock waits, ClientRead = idle in a transaction or waiting for the node, IO
# waits; and the statement they run).
sample_server() {
    while kill -0 "$1" 2>/dev/null; do
        echo "SELECT 'conns', count(*) FROM pg_stat_activity WHERE $RUN_DB;"
        echo "SELECT 'xacts', coalesce(sum(xact_commit + xact_rollback), 0) FROM pg_stat_database WHERE $RUN_DB;"
        echo "SELECT 'activity', to_char(clock_timestamp(), 'HH24:MI:SS.MS'), pid, backend_type, coalesce(datname, '-'), coalesce(wait_event, '-'), left(coalesce(query, ''), 80) FROM pg_stat_activity WHERE backend_type <> 'client backend' UNION ALL SELECT 'activity', to_char(clock_timestamp(), 'HH24:MI:SS.MS'), 0, 'databases', string_agg(datname, ' ' ORDER BY datname), '-', '' FROM pg_database;"
        echo "SELECT 'waits', to_char(clock_timestamp(), 'HH24:MI:SS.MS'), state, coalesce(wait_event_type, '-'), coalesce(wait_event, '-'), left(regexp_replace(coalesce(query, ''), '\s+', ' ', 'g'), 60) FROM pg_stat_activity WHERE backend_type = 'client backend' AND $RUN_DB;"
        sleep 0.5
    done
}
# The run's queue tables every half second (live and dead tuples, vacuums, sizes; the last
# sample is the run's end: the harness drops its database when it stops), through one psql
# session on the run's database, opened once the harness has made it.
sample_run_db() {
    local db=
    while [ -z "$db" ] && kill -0 "$1" 2>/dev/null; do
        db=$(q "SELECT datname FROM pg_database WHERE $RUN_DB LIMIT 1") || db=
        [ -n "$db" ] || sleep 0.5
    done
    [ -n "$db" ] || return 0
    while kill -0 "$1" 2>/dev/null; do
        echo "SELECT to_char(clock_timestamp(), 'HH24:MI:SS.MS'), relname, n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd, vacuum_count, autovacuum_count, autoanalyze_count, pg_relation_size(relid), pg_indexes_size(relid) FROM pg_stat_user_tables WHERE relname IN ('tasks', 'replay_guard', 'events', 'attempts') UNION ALL SELECT to_char(clock_timestamp(), 'HH24:MI:SS.MS'), indexrelname, idx_scan, idx_tup_read, idx_tup_fetch, 0, 0, 0, 0, pg_relation_size(indexrelid), 0 FROM pg_stat_user_indexes WHERE relname = 'tasks';"
        sleep 0.5
    done | "${RUN[@]}" "$PGBIN/psql" -h "$PGDIR" -p "$PORT" -U webhookd -d "$db" -AtXq
}
for round in $(seq 1 "$ROUNDS"); do
for config in $CONFIGS; do
    for scenario in $SCENARIOS; do
    for label in "${LABELS[@]}"; do
        name=$config-$scenario
        binary=()
        if [ "$label" != - ]; then
            name=$label-$name
            binary=(env WEBHOOKD_BENCH_BINARY="$OUT/bin-$label/webhookd")
        fi
        [ "$ROUNDS" -gt 1 ] && name=$name-r$round
        echo "== $name (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
        pidstat -u -h 1 -C 'webhookd|postgres|bench' >"$OUT/$name.pidstat" 2>/dev/null &
        pid_pidstat=$!
        mpstat 1 >"$OUT/$name.mpstat" 2>/dev/null &
        pid_mpstat=$!
        workers=()
        [ -n "${WORKERS:-}" ] && workers=(--workers "$WORKERS")
        # shellcheck disable=SC2046,SC2086 # the argument lists are meant to split
        "${binary[@]}" "$BENCH" $(args_for_scenario "$scenario") $(args_for_config "$config") \
            "${workers[@]}" ${BENCH_ARGS:-} --json >"$OUT/$name.json" 2>"$OUT/$name.log" &
        pid_bench=$!
        # Whose samples count: the harness, its nodes, and this server's processes (other
        # programs on the machine may run webhookd or PostgreSQL too).
        echo "$pid_bench $PGPID" >"$OUT/$name.pids"
        wal0=$(q "SELECT pg_current_wal_lsn()")
        q "SELECT pg_stat_statements_reset()" >/dev/null
        trips0=$(cat "$OUT/roundtrips.json" 2>/dev/null || echo '{}')
        [ "$config" != sqlite ] && q "SELECT $BGWRITER" >"$OUT/$name.bgwriter"
        # The samples every half second go to two psql sessions that stay open for the run (one
        # on `bench` for the server-wide views, one on the run's database once it exists): a
        # psql started per query costs a process, a connection and a backend each, and five a
        # half second cost up to 16% of the rates and two to four times the half-rate p99 on
        # two cores (BENCHMARKS.md, "The three-node tail taken apart").
        samplers=()
        if [ "$config" != sqlite ]; then
            sample_server "$pid_bench" | "${RUN[@]}" "$PGBIN/psql" -h "$PGDIR" -p "$PORT" -U webhookd \
                -d bench -AtXq >"$OUT/$name.samples" 2>/dev/null &
            samplers+=($!)
            sample_run_db "$pid_bench" >"$OUT/$name.tables" 2>/dev/null &
            samplers+=($!)
        fi
        while kill -0 "$pid_bench" 2>/dev/null; do
            ps -o pid= --ppid "$pid_bench" --ppid "$PGPID" >>"$OUT/$name.pids" || true
            sleep 0.5
        done
        # They stop within half a second of the harness.
        for sampler in "${samplers[@]}"; do wait "$sampler" 2>/dev/null || true; done
        peak=0 xacts=0
        if [ "$config" != sqlite ]; then
            sed -n 's/^activity|//p' "$OUT/$name.samples" >"$OUT/$name.activity"
            sed -n 's/^waits|//p' "$OUT/$name.samples" >"$OUT/$name.waits"
            peak=$(sed -n 's/^conns|//p' "$OUT/$name.samples" | sort -n | tail -1)
            xacts=$(sed -n 's/^xacts|//p' "$OUT/$name.samples" | { grep -v '^0$' || true; } | tail -1)
            peak=${peak:-0} xacts=${xacts:-0}
        fi
        [ "$config" != sqlite ] && q "SELECT $BGWRITER" >>"$OUT/$name.bgwriter"
        if [ "$config" != sqlite ]; then
            wal=$(q "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$wal0')::bigint")
            others="dbid NOT IN (SELECT oid FROM pg_database WHERE datname IN ('bench', 'postgres'))"
            stmts=$(q "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE $others AND query NOT IN ('BEGIN', 'START TRANSACTION', 'COMMIT', 'ROLLBACK')")
            utility=$(q "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE $others AND query IN ('BEGIN', 'START TRANSACTION', 'COMMIT', 'ROLLBACK')")
            # calls | rows | total execution ms | buffers read per call (shared blocks hit and
            # read: what a statement touched, whatever the load) | statement: where
            # PostgreSQL's time goes.
            q "SELECT calls, rows, round(total_exec_time::numeric, 1), round((shared_blks_hit + shared_blks_read)::numeric / greatest(calls, 1), 1), left(regexp_replace(query, '\s+', ' ', 'g'), 160) FROM pg_stat_statements WHERE $others ORDER BY calls DESC LIMIT 40" >"$OUT/$name.statements"
            trips1=$(cat "$OUT/roundtrips.json" 2>/dev/null || echo '{}')
            jq -n --argjson wal "$wal" --argjson stmts "$stmts" --argjson utility "$utility" \
                --argjson xacts "$xacts" --argjson peak "$peak" --argjson t0 "$trips0" --argjson t1 "$trips1" \
                '{wal_bytes: $wal, statements: $stmts, begin_commit: $utility, transactions: $xacts,
                  peak_connections: $peak,
                  round_trips: (if $t1.query then ($t1.query + $t1.parse + $t1.execute) - (($t0.query // 0) + ($t0.parse // 0) + ($t0.execute // 0)) else null end),
                  connections_opened: (if $t1.connections then $t1.connections - ($t0.connections // 0) else null end)}' \
                >"$OUT/$name.counts"
        fi
        if ! wait "$pid_bench"; then
            echo "bench-pg: $name failed:" >&2
            tail -5 "$OUT/$name.log" | sed "s/$PASSWORD/***/g" >&2
        fi
        kill "$pid_pidstat" "$pid_mpstat" 2>/dev/null || true
        wait "$pid_pidstat" "$pid_mpstat" 2>/dev/null || true
    done
    done
done
done

# The table: figures from the JSON lines, CPU from the samples (CPU-seconds per program over
# the run, and the machine's busy share: what the other programs took is the busy share minus
# ours).
LABELS="${LABELS[*]}" ROUNDS=$ROUNDS python3 - "$OUT" $CONFIGS -- $SCENARIOS <<'PY'
import json, os, statistics, sys
from collections import defaultdict
sys.path.insert(0, "scripts")
from pidstat_cpu import cpu_seconds
out = sys.argv[1]
split = sys.argv.index("--")
configs, scenarios = sys.argv[2:split], sys.argv[split + 1:]
labels = os.environ.get("LABELS", "-").split()
rounds = int(os.environ.get("ROUNDS", "1"))
figures = {
    "publish1": [("delivered_per_s", "del/s"), ("latency_p99_ms", "p99 full ms"),
                 ("half_latency_p99_ms", "p99 half ms"), ("publish_request_p99_ms", "req p99 ms")],
    "publish10": [("delivered_per_s", "del/s"), ("latency_p99_ms", "p99 full ms"),
                  ("half_latency_p99_ms", "p99 half ms"), ("publish_request_p99_ms", "req p99 ms")],
    "api": [("get_endpoint_per_s", "GET/s"), ("get_endpoint_p99_ms", "p99 ms"),
            ("list_failed_tasks_per_s", "list/s")],
    "schedules": [("created_per_s", "created/s"), ("all_created_after_s", "created s"),
                  ("all_delivered_after_s", "delivered s")],
}
def names(label, config, scenario):
    """The runs of one binary, config and scenario (one per round)."""
    base = f"{config}-{scenario}" if label == "-" else f"{label}-{config}-{scenario}"
    return [base] if rounds == 1 else [f"{base}-r{r}" for r in range(1, rounds + 1)]
def row_name(label, config):
    return config if label == "-" else f"{label} {config}"
def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
def fmt(v):
    return "—" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}")
def report(name):
    try:
        reports = [json.loads(l) for l in open(os.path.join(out, name + ".json")) if l.strip()]
    except (FileNotFoundError, ValueError):
        return None
    return reports[-1] if reports else None
def cpu(name):
    try:
        ours = set(open(os.path.join(out, name + ".pids")).read().split())
    except FileNotFoundError:
        ours = set()
    try:
        counted, samples = cpu_seconds(os.path.join(out, name + ".pidstat"), ours)
    except FileNotFoundError:
        counted, samples = {}, 0
    secs = defaultdict(float, counted)
    busy, n = 0.0, 0
    try:
        for line in open(os.path.join(out, name + ".mpstat")):
            f = line.split()
            if len(f) > 3 and f[1] == "all" and f[0] != "Average:":
                busy += 100.0 - float(f[-1]); n += 1
    except FileNotFoundError:
        pass
    return secs, (busy / n if n else float("nan")), samples
if rounds > 1:
    print(f"\nMedians of {rounds} rounds (each round runs every binary in turn).")
for scenario in scenarios:
    cols = figures[scenario]
    print(f"\n### {scenario}\n")
    print("| config | " + " | ".join(h for _, h in cols) +
          " | CPU s: webhookd / postgres / harness | machine busy % | errors / notes |")
    print("|---" * (len(cols) + 4) + "|")
    for config in configs:
        for label in labels:
            runs = [(n, report(n)) for n in names(label, config, scenario)]
            runs = [(n, r) for n, r in runs if r]
            if not runs:
                print(f"| {row_name(label, config)} | " + " | ".join("—" for _ in cols)
                      + " | | | run failed (see log) |")
                continue
            vals = [fmt(median([r.get(key) for _, r in runs])) for key, _ in cols]
            cpus = [cpu(n) for n, _ in runs]
            c = " / ".join(fmt(median([s.get(p, 0.0) for s, _, _ in cpus]))
                           for p in ("webhookd", "postgres", "bench"))
            busy = median([b for _, b, _ in cpus])
            notes, errs = [], []
            for n, r in runs:
                notes += r.get("notes", [])
                errs += [f"{k}={r[k]}" for k in r if k.endswith("errors") and r[k]]
            print(f"| {row_name(label, config)} | " + " | ".join(vals)
                  + f" | {c} | {busy:.0f} | " + (", ".join(errs) + " " if errs else "")
                  + "; ".join(sorted(set(notes))) + " |")
print("\n### per delivery (counts do not depend on load; CPU-ms do)\n")
print("| run | deliveries | WAL bytes | statements | BEGIN+COMMIT | transactions | round trips | CPU-ms webhookd / postgres | peak connections |")
print("|---|---|---|---|---|---|---|---|---|")
for config in configs:
    for scenario in scenarios:
        for label in labels:
            per = defaultdict(list)
            n_total, peak = [], []
            for name in names(label, config, scenario):
                try:
                    counts = json.load(open(os.path.join(out, name + ".counts")))
                except (FileNotFoundError, ValueError):
                    continue
                r = report(name)
                if not r:
                    continue
                # Both phases: full rate, then half rate, paced.
                n = (r.get("deliveries_received") or 0) + (r.get("half_deliveries_received") or 0)
                if not n:
                    continue
                n_total.append(n)
                peak.append(counts["peak_connections"])
                for key in ("wal_bytes", "statements", "begin_commit", "transactions", "round_trips"):
                    per[key].append(None if counts.get(key) is None else counts[key] / n)
                secs, _, _ = cpu(name)
                per["cpu_webhookd"].append(secs.get("webhookd", 0) * 1000 / n)
                per["cpu_postgres"].append(secs.get("postgres", 0) * 1000 / n)
            if not n_total:
                continue
            m = {k: median(v) for k, v in per.items()}
            f2 = lambda v: "—" if v is None else f"{v:.2f}"
            run = f"{config}-{scenario}" if label == "-" else f"{label} {config}-{scenario}"
            print(f"| {run} | {median(n_total):,.0f} | {f2(m['wal_bytes'])} | {f2(m['statements'])} | "
                  f"{f2(m['begin_commit'])} | {f2(m['transactions'])} | {f2(m['round_trips'])} | "
                  f"{f2(m['cpu_webhookd'])} / {f2(m['cpu_postgres'])} | {max(peak)} |")
PY
echo "(raw JSON, logs and samples in $OUT)" >&2
