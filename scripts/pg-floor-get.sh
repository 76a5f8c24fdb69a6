#!/usr/bin/env bash
# PostgreSQL's own ceiling for a signed `GET /v1/endpoints/{id}` on this machine: pgbench runs
# exactly the statements one such GET sends, prepared, from 32 clients, against a private
# server set up as scripts/bench-pg.sh sets up its own, and pidstat measures the CPU of the
# server and of pgbench. Scripts (each transaction is one GET's statements):
#   two     today's path before the fold: the replay pair (`first_use_at_key_generation`, with
#           synchronous_commit off for its own transaction) and then the endpoint's read, two
#           autocommit statements
#   fused   the pair and the read in one autocommit statement (src/store/postgres/replay.rs,
#           `PgTx::query_carrying`)
#   read    the read alone (no replay record: what a GET would cost PostgreSQL without one)
# The statements mirror src/store/postgres/{replay,endpoints}.rs; the pair's signed time goes
# up by one per GET of each client from the wall clock's milliseconds, its signature is random,
# as the API's are, so every insert lands on the newest leaf of the table's key as it does
# under the API.
#
# Prints, per script: GETs/s, CPU-s of postgres and of pgbench, and CPU-ms per GET of each
# (from /proc and bash's `time`, exact; and as pidstat samples it, which misses each process's
# first second).
#
# Usage: scripts/pg-floor-get.sh [OUT_DIR]
# Env: SECS (default 15), CLIENTS (32), SCRIPTS ("two fused read"), ROUNDS (1: each round
#      runs every script in turn), WEBHOOKD (the binary that lays out the schema; default
#      target/release/webhookd), SYNC (on; off: synchronous_commit=off server-wide).
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C S_TIME_FORMAT=ISO

OUT=${1:-$(mktemp -d /tmp/pg-floor-get.XXXXXX)}
mkdir -p "$OUT"
SECS=${SECS:-15}
CLIENTS=${CLIENTS:-32}
SCRIPTS=${SCRIPTS:-two fused read}
ROUNDS=${ROUNDS:-1}
SYNC=${SYNC:-on}
WEBHOOKD=${WEBHOOKD:-target/release/webhookd}
[ -x "$WEBHOOKD" ] || { echo "pg-floor-get: no binary at $WEBHOOKD (cargo build --release)" >&2; exit 2; }
command -v pidstat >/dev/null || { echo "pg-floor-get: pidstat is missing (apt-get install -y sysstat)" >&2; exit 2; }
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$PGBIN/pgbench" ] || { echo "pg-floor-get: no PostgreSQL server and pgbench (apt-get install -y postgresql)" >&2; exit 2; }

# The private server, made as bench-pg.sh makes its own (scripts/pg-server.sh), so both
# measure the same server configuration.
# shellcheck source=scripts/pg-server.sh
source scripts/pg-server.sh
pg_server_start

# webhookd's schema in a database of its own (as the harness makes one per run), an API key,
# and one endpoint to read (as the api scenario's).
q "CREATE DATABASE floor" >/dev/null
"$WEBHOOKD" keys create --db "${URL%/bench}/floor" --app app1 --name floor --json >/dev/null 2>&1
q() { "${RUN[@]}" "$PGBIN/psql" -h "$PGDIR" -p "$PORT" -U webhookd -d floor -AtXqc "$1"; }
q "INSERT INTO endpoints (app_id, name, url, method, timeout_ms, status, created_at, updated_at)
   VALUES ('app1', 'e1', 'http://127.0.0.1:9/h', 'POST', 10000, 'enabled', 0, 0)" >/dev/null
ID=$(q "SELECT max(id) FROM endpoints")
KEY=$(q "SELECT key_id FROM api_keys LIMIT 1")

COLUMNS="id, app_id, name, url, method, headers, secret, timeout_ms, retry_policy_id, filter_events, status, created_at, updated_at, rate_limit_per_sec, max_in_flight, previous_secret, previous_secret_expires_at, disabled_reason, last_success_at, last_failure_at, consecutive_failures, filter_payload"
READ="SELECT $COLUMNS FROM endpoints WHERE app_id = :app AND id = :id"
# record_pair_at_generation(first) in replay.rs, with pgbench's variables for its parameters.
pair() {
    echo "INSERT INTO replay_guard (key_id, signature, sent_at, expires_at)
         VALUES (:key, :sig, :t, :e)
         ON CONFLICT (sent_at, key_id, signature) DO UPDATE SET expires_at = excluded.expires_at
         WHERE replay_guard.expires_at < :t RETURNING coalesce((SELECT generation FROM key_generation WHERE id = 1), 0) AS generation"
}
HEAD='\set t :t + 1
\set e :t + 300000
\set sig random(1, 9000000000000000000)'
{
    echo "$HEAD"
    echo "$(pair), set_config('synchronous_commit', 'off', true);" | tr '\n' ' '; echo
    echo "$READ;"
} >"$OUT/two.sql"
{
    echo "$HEAD"
    echo "WITH pair AS ($(pair)) SELECT found.*, (SELECT generation FROM pair), set_config('synchronous_commit', 'off', true) FROM (VALUES (0)) AS one LEFT JOIN (SELECT *, true FROM ($READ) r) AS found ON true;" | tr '\n' ' '; echo
} >"$OUT/fused.sql"
echo "$READ;" >"$OUT/read.sql"

# CPU-seconds this server has used so far: the postmaster's own, its live children's (the WAL
# writer, the checkpointer, …) and its exited children's (backends, reaped by the postmaster:
# /proc's cutime and cstime). Exact where pidstat's 1 s samples miss a backend's first second.
pg_cpu() {
    python3 - "$PGPID" <<'PY'
import os, sys
pg = sys.argv[1]
def fields(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()
ticks = 0
f = fields(pg)
ticks += sum(int(x) for x in f[11:15])  # utime stime cutime cstime
for pid in os.listdir("/proc"):
    if pid.isdigit() and pid != pg:
        try:
            c = fields(pid)
        except OSError:
            continue
        if c[1] == pg:
            ticks += int(c[11]) + int(c[12])
print(ticks / os.sysconf("SC_CLK_TCK"))
PY
}

echo "== pg-floor-get: $CLIENTS clients, ${SECS}s per script, server port $PORT (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
printf '| script | round | GETs/s | CPU s postgres / pgbench | CPU-ms per GET postgres / pgbench | same, pidstat | machine busy %% | load average |\n|---|---|---|---|---|---|---|---|\n' >"$OUT/table.md"
for round in $(seq 1 "$ROUNDS"); do
    for script in $SCRIPTS; do
        name=$script-r$round
        load=$(cut -d' ' -f1-3 /proc/loadavg)
        pidstat -u -h 1 -C 'postgres|pgbench' >"$OUT/$name.pidstat" 2>/dev/null &
        pid_pidstat=$!
        mpstat 1 >"$OUT/$name.mpstat" 2>/dev/null &
        pid_mpstat=$!
        cpu0=$(pg_cpu)
        # Over TCP on loopback, as webhookd connects; pgbench's own CPU from bash's `time`.
        TIMEFORMAT='%U %S'
        { time "${RUN[@]}" env PGPASSWORD="$PASSWORD" "$PGBIN/pgbench" -h 127.0.0.1 -p "$PORT" \
            -U webhookd -n -M prepared -c "$CLIENTS" -j 2 -T "$SECS" -D t="$(date +%s%3N)" \
            -D key="$KEY" -D app=app1 -D id="$ID" -f "$OUT/$script.sql" floor \
            >"$OUT/$name.out" 2>"$OUT/$name.err" </dev/null; } 2>"$OUT/$name.time" &
        pid_bench=$!
        # Whose samples count: pgbench and this server's processes (other programs on the
        # machine run PostgreSQL too).
        echo "$PGPID" >"$OUT/$name.pids"
        while kill -0 "$pid_bench" 2>/dev/null; do
            ps -o pid= --ppid "$PGPID" >>"$OUT/$name.pids" || true
            pgrep -x pgbench >>"$OUT/$name.pids" || true
            sleep 0.5
        done
        if ! wait "$pid_bench"; then
            kill "$pid_pidstat" "$pid_mpstat" 2>/dev/null || true
            cat "$OUT/$name.err" >&2
            exit 1
        fi
        sleep 0.5 # the backends exit and are reaped
        cpu1=$(pg_cpu)
        echo "$cpu0 $cpu1" >"$OUT/$name.pgcpu"
        kill "$pid_pidstat" "$pid_mpstat" 2>/dev/null || true
        wait "$pid_pidstat" "$pid_mpstat" 2>/dev/null || true
        python3 - "$OUT" "$name" "$script" "$round" "$load" "$PGPID" >>"$OUT/table.md" <<'PY'
import os, re, sys
sys.path.insert(0, "scripts")
from pidstat_cpu import cpu_seconds
out, name, script, rnd, load, pgpid = sys.argv[1:]
text = open(os.path.join(out, name + ".out")).read()
tps = float(re.search(r"tps = ([\d.]+)", text).group(1))
gets = int(re.search(r"number of transactions actually processed: (\d+)", text).group(1))
ours = set(open(os.path.join(out, name + ".pids")).read().split())
counted, _ = cpu_seconds(os.path.join(out, name + ".pidstat"), ours)
secs = {prog: counted.get(prog, 0.0) for prog in ("postgres", "pgbench")}
busy = [100.0 - float(l.split()[-1]) for l in open(os.path.join(out, name + ".mpstat"))
        if len(l.split()) > 3 and l.split()[1] == "all" and not l.startswith("Average")]
cpu0, cpu1 = map(float, open(os.path.join(out, name + ".pgcpu")).read().split())
bench = sum(map(float, open(os.path.join(out, name + ".time")).read().split()[-2:]))
per = lambda s: 1000.0 * s / gets
print(f"| {script} | {rnd} | {tps:,.0f} | {cpu1 - cpu0:.1f} / {bench:.1f} | "
      f"{per(cpu1 - cpu0):.3f} / {per(bench):.3f} | "
      f"{per(secs['postgres']):.3f} / {per(secs['pgbench']):.3f} | "
      f"{sum(busy) / max(len(busy), 1):.0f} | {load} |")
PY
        tail -1 "$OUT/table.md" >&2
    done
done
cat "$OUT/table.md"
echo "(pgbench output and samples in $OUT)" >&2
