#!/usr/bin/env bash
# PostgreSQL's floor for webhookd's deliveries (#20): webhookd's own statements replayed with
# pgbench, as fast as this machine allows, with no webhookd, no HTTP and no harness. What it
# reaches is the most deliveries/s PostgreSQL can carry for that statement mix here; a target
# above it cannot be met with those statements (BENCHMARKS.md, "The floor").
#
# Starts the benchmark's own server (scripts/pg-server.sh: the same configuration as
# scripts/bench-pg.sh, fsync and synchronous_commit on), lets `webhookd serve` create its schema
# on a database once, makes one app with FANOUT endpoints and a history of 20,000 delivered
# events (so the plans are those of a used table), then measures the two sides of a delivery
# one after the other with pgbench (prepared protocol), neither running while the other does:
#   publish  CLIENTS connections (the harness's 16 clients) for SECS seconds, each publishing
#            as fast as it can: BEGIN, the replay pair (`first_use_at_key_generation`), the
#            target generation read (`enabled_targets_since`, unchanged), the event and its
#            FANOUT tasks (`insert_event_with_tasks`), COMMIT: what `POST /v1/events` sends.
#            Picked at random beside them, NOTICES per publish: `SELECT set_config(…),
#            pg_notify(…)`, the store-notifier's transaction.
#   deliver  one connection (the dispatcher thread has one) draining that backlog in rounds of
#            K tasks, webhookd's size: BEGIN, SET LOCAL synchronous_commit = off, the results
#            of the tasks it claimed last round (`finish_attempts`, `insert_attempts`, the
#            batched forms) and one health update per endpoint (`record_endpoint_health`) for
#            EPR endpoints, the walk (`endpoints_with_pending`, WALKS times), the claim
#            (`claim_endpoints_tasks`, or `claim_endpoint_tasks` at fan-out 1), one endpoint
#            read (`get_endpoint_any`) per endpoint for EPR endpoints, COMMIT.
# The statements are webhookd's as written in src/store/postgres (same text and parameters,
# arrays as arrays), with two changes pgbench needs: times are the statement's clock
# (`statement_timestamp()` in ms) instead of a parameter, and the claim is wrapped in a CTE
# that aggregates what it returned into the arrays the next round's results send (each task
# answered 200 in 1 ms). The claim's and walk's floor is exact: the latest due time claimed
# (webhookd's `ClaimFloors` starts 1 s below it and searches in full every second, for
# publishes that commit late; the backlog here is committed before the rounds start), so a
# claim never steps over the index entries of tasks claimed before: PostgreSQL's best case.
#
# MIX=checked runs this branch's statements instead: the publish without the target
# generation read, its event insert testing the generation itself
# (`insert_event_with_tasks_at`), and a round's health updates and endpoint reads in one
# statement each (`record_endpoints_health`, `get_endpoints_any`).
#
# MIX=round runs the publish of MIX=checked and the round of branch `pground` instead: BEGIN,
# SET LOCAL, the results and their attempts in one statement (`record_attempts`), the health
# update (`record_endpoints_health`), one walk (WALKS=1: every endpoint read at once), the
# claim returning each task's target generation, no endpoint read (the endpoints are held at
# that generation), COMMIT. K is the tasks per round measured with that build.
#
# MIX=ideal runs the smallest mix that could publish and deliver instead: a publish is one
# statement, its own transaction (pair, event and tasks; the event only when the pair is new;
# the targets held in memory unchecked); a round of IDEAL_BATCH tasks is BEGIN, SET LOCAL, one
# statement for the results and their attempts, one claim, COMMIT; no health updates, endpoint
# reads, walks or notices.
#
# Prints per side the rate, PostgreSQL's CPU per delivery (pidstat: this server's processes
# only), statements and WAL bytes per delivery, and the floor: 2 cores divided by PostgreSQL's
# CPU per delivery of both sides (what PostgreSQL alone could carry here), and the rate of both
# sides run in turn as measured. Scripts, statements and samples stay in OUT.
#
# Usage: scripts/pg-floor.sh [OUT_DIR]
# Env: FANOUT (1), MIX (webhookd | checked | round | ideal), CLIENTS (16), SECS (10), WEBHOOKD (the binary that
#      makes the schema; default target/release/webhookd); for MIX=webhookd, taken from main's
#      pg1 publish1 / publish10 runs of scripts/bench-pg.sh (BENCHMARKS.md, "The floor"):
#      K (tasks per round: 6 / 24), NOTICES (per publish: 0.23 / 0.44), WALKS (per round: 2),
#      EPR (endpoints per round: 1 / 10); IDEAL_BATCH (32), SYNC (on).
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C S_TIME_FORMAT=ISO

OUT=${1:-$(mktemp -d /tmp/pg-floor.XXXXXX)}
mkdir -p "$OUT"
chmod 755 "$OUT" # pgbench may run as `postgres` and reads its scripts here
FANOUT=${FANOUT:-1}
MIX=${MIX:-webhookd}
CLIENTS=${CLIENTS:-16}
SECS=${SECS:-10}
WEBHOOKD=${WEBHOOKD:-target/release/webhookd}
IDEAL_BATCH=${IDEAL_BATCH:-32}
[ "$MIX" = round ] && WALKS=${WALKS:-1}
if [ "$FANOUT" = 1 ]; then
    K=${K:-6} NOTICES=${NOTICES:-0.23} WALKS=${WALKS:-2} EPR=${EPR:-1}
else
    K=${K:-24} NOTICES=${NOTICES:-0.44} WALKS=${WALKS:-2} EPR=${EPR:-10}
fi
for tool in pidstat jq curl; do
    command -v "$tool" >/dev/null || { echo "pg-floor: $tool is missing (apt-get install -y sysstat jq curl)" >&2; exit 2; }
done
[ -x "$WEBHOOKD" ] || { echo "pg-floor: no webhookd binary at $WEBHOOKD (cargo build --release, or WEBHOOKD=…)" >&2; exit 2; }

# shellcheck source=scripts/pg-server.sh
source scripts/pg-server.sh
pg_server_start
PGBENCH=$PGBIN/pgbench
[ -x "$PGBENCH" ] || { echo "pg-floor: no pgbench in $PGBIN" >&2; exit 2; }

# webhookd's schema, made by webhookd itself on a database of its own (`bench` holds
# pg_stat_statements' view, which webhookd would take for another program's): serve until
# healthy, then stop.
q "CREATE DATABASE floor" >/dev/null
qf() { "${RUN[@]}" "$PGBIN/psql" -h "$PGDIR" -p "$PORT" -U webhookd -d floor -AtXqc "$1"; }
FLOOR_URL=${URL%/bench}/floor
HTTP_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
WEBHOOKD_LOG=warn "$WEBHOOKD" serve --db "$FLOOR_URL" --listen "127.0.0.1:$HTTP_PORT" >"$OUT/serve.log" 2>&1 &
serve=$!
for _ in $(seq 1 300); do
    curl -fs "http://127.0.0.1:$HTTP_PORT/healthz" >/dev/null 2>&1 && break
    kill -0 "$serve" 2>/dev/null || { echo "pg-floor: webhookd serve exited:" >&2; cat "$OUT/serve.log" >&2; exit 1; }
    sleep 0.1
done
kill "$serve"
wait "$serve" || true

# One app, FANOUT enabled endpoints (ids 1..FANOUT), its target generation 1.
qf "INSERT INTO endpoints (id, app_id, name, url, method, timeout_ms, status, created_at, updated_at)
   SELECT i, 'app_floor', 'floor-' || i, 'http://127.0.0.1:9/hook', 'POST', 5000, 'enabled', 0, 0
   FROM generate_series(1, $FANOUT) AS i;
   INSERT INTO target_generation (app_id, generation) VALUES ('app_floor', 1);
   INSERT INTO key_generation (id, generation) VALUES (1, 1) ON CONFLICT (id) DO NOTHING" >/dev/null
# A history of 20,000 delivered events, so the planner's statistics (and pgbench's prepared
# plans, made once) see a tasks table, not an empty one that a sequential scan would suit.
qf "INSERT INTO events (id, app_id, event_name, payload, status, task_count, created_at)
      OVERRIDING SYSTEM VALUE
    SELECT i, 'app_floor', 'bench.floor', '{}', 'dispatched', $FANOUT, i FROM generate_series(1, 20000) AS i;
    INSERT INTO tasks (app_id, event_id, endpoint_id, task_type, payload, status, run_at, attempts,
                       max_attempts, finished_at, created_at, updated_at)
    SELECT 'app_floor', i, e, 'event', '{}', 'success', i, 1, 5, i, i, i
      FROM generate_series(1, 20000) AS i, generate_series(1, $FANOUT) AS e;
    SELECT setval(pg_get_serial_sequence('events', 'id'), 20000)" >/dev/null
qf "VACUUM ANALYZE" >/dev/null

# The arrays a publish's tasks send (webhookd builds them per publish; only the trace differs).
ENDPOINTS=$(seq -s, 1 "$FANOUT")
rep() { local v=$1 out=; for _ in $(seq 1 "$FANOUT"); do out=${out:+$out,}$v; done; echo "{$out}"; }
NOW="(extract(epoch FROM statement_timestamp()) * 1000)::int8"
ALL_IDS="{$ENDPOINTS}"

publish_sql() {
    cat <<EOF
\set sig random(1, 9223372036854775807)
BEGIN;
INSERT INTO replay_guard (key_id, signature, sent_at, expires_at) VALUES (:key_id, :sig, $NOW, $NOW + 300000)
  ON CONFLICT (sent_at, key_id, signature) DO UPDATE SET expires_at = excluded.expires_at
  WHERE replay_guard.expires_at < $NOW
  RETURNING coalesce((SELECT generation FROM key_generation WHERE id = 1), 0);
EOF
    if [ "$MIX" = checked ] || [ "$MIX" = round ]; then
        cat <<EOF
WITH e AS (
     INSERT INTO events (app_id, event_name, event_key, payload, status, task_count, created_at)
     SELECT :app_id, :event_name, NULL, :payload, 'dispatched', $FANOUT, $NOW
     WHERE coalesce((SELECT generation FROM target_generation WHERE app_id = :app_id), 0) = :held
     RETURNING id, app_id, event_name, event_key, payload, status, task_count, created_at),
EOF
    else
        cat <<EOF
WITH g AS (SELECT coalesce(
     (SELECT generation FROM target_generation WHERE app_id = :app_id), 0) AS generation)
 SELECT g.generation, e.id, e.filter_events, coalesce(p.max_attempts, :default_attempts), e.filter_payload
 FROM g LEFT JOIN endpoints e
   ON g.generation IS DISTINCT FROM :held::bigint AND e.app_id = :app_id AND e.status = 'enabled'
 LEFT JOIN retry_policies p ON p.id = e.retry_policy_id
 ORDER BY e.id;
WITH e AS (
     INSERT INTO events (app_id, event_name, event_key, payload, status, task_count, created_at)
     VALUES (:app_id, :event_name, NULL, :payload, 'dispatched', $FANOUT, $NOW)
     RETURNING id, app_id, event_name, event_key, payload, status, task_count, created_at),
EOF
    fi
    cat <<EOF
 t AS ($(tasks_insert "e.id" ", e"))
 SELECT id, app_id, event_name, event_key, payload, status, task_count, created_at FROM e;
COMMIT;
EOF
}

# insert_tasks_sql's statement, the time taken from the clock.
tasks_insert() {
    cat <<EOF
INSERT INTO tasks (app_id, schedule_id, event_id, endpoint_id, task_type, payload, status, run_at,
                   attempts, max_attempts, next_attempt_at, created_at, updated_at,
                   trace_id, trace_parent, trace_flags)
 SELECT u.app_id, u.schedule_id, $1, u.endpoint_id, u.task_type, u.payload, 'pending', $NOW,
        0, u.max_attempts, $NOW, $NOW, $NOW, u.trace_id, u.trace_parent, u.trace_flags
 FROM unnest(:t_apps::text[], :t_nulls::int8[], :t_nulls::int8[], :t_endpoints::int8[], :t_kinds::text[], :t_payloads::text[],
             :t_nulls::int8[], :t_attempts::int8[], :t_nulls::int8[], :t_traces::text[], :t_parents::text[], :t_flags::int8[])
      WITH ORDINALITY AS u(app_id, schedule_id, event_id, endpoint_id, task_type, payload,
                           run_at, max_attempts, now_ms, trace_id, trace_parent, trace_flags, ord)
      $2
 ORDER BY u.ord
EOF
}

# The claim, aggregated into the next round's results (each task answered 200 after 1 ms).
claim_sql() {
    local due generation=
    [ "$MIX" = round ] &&
        generation=",
         coalesce((SELECT g.generation FROM target_generation g WHERE g.app_id = t.app_id), 0)"
    if [ "$FANOUT" = 1 ]; then
        due="SELECT id FROM tasks
              WHERE status = 'pending' AND endpoint_id = 1 AND next_attempt_at <= $NOW
                AND next_attempt_at >= :r_floor
              ORDER BY next_attempt_at, id LIMIT :claim_limit
              FOR UPDATE SKIP LOCKED"
    else
        due="SELECT d.id FROM unnest(:all_ids::int8[], :limits::int8[], :floors::int8[]) AS w(endpoint_id, n, floor)
             CROSS JOIN LATERAL (
                 SELECT id FROM tasks
                  WHERE status = 'pending' AND endpoint_id = w.endpoint_id
                    AND next_attempt_at <= $NOW AND next_attempt_at >= w.floor
                  ORDER BY next_attempt_at, id LIMIT w.n
                  FOR UPDATE SKIP LOCKED) d"
    fi
    cat <<EOF
WITH due AS ($due),
 c AS (UPDATE tasks t SET status = 'running', claimed_by = :node, updated_at = $NOW,
         lease_until = $NOW + coalesce((SELECT e.timeout_ms FROM endpoints e WHERE e.id = t.endpoint_id), 0) + 30000
       FROM due WHERE t.id = due.id AND t.status = 'pending'
       RETURNING t.id, t.endpoint_id, t.schedule_id, t.event_id,
         (SELECT event_name FROM events WHERE events.id = t.event_id),
         t.payload, t.attempts + 1 AS attempt, t.max_attempts, t.next_attempt_at,
         coalesce(t.next_attempt_at, t.run_at), t.app_id, t.trace_id, t.trace_parent, t.trace_flags$generation)
SELECT count(*) AS n, coalesce(max(next_attempt_at), :r_floor::int8) AS r_floor,
       coalesce(array_agg(id), '{}')::text AS r_ids,
       coalesce(array_agg(attempt), '{}')::text AS r_attempts,
       coalesce(array_agg('success'::text), '{}')::text AS r_statuses,
       coalesce(array_agg(NULL::int8), '{}')::text AS r_nexts,
       coalesce(array_agg(200::int8), '{}')::text AS r_codes,
       coalesce(array_agg(NULL::text), '{}')::text AS r_errors,
       coalesce(array_agg($NOW), '{}')::text AS r_nows,
       coalesce(array_agg(1::int8), '{}')::text AS r_durations,
       coalesce(array_agg(''::text), '{}')::text AS r_bodies,
       coalesce(array_agg(:headers::text), '{}')::text AS r_headers
  FROM c
\gset
EOF
}

# finish_attempts' statement.
finish_sql() {
    cat <<'EOF'
UPDATE tasks SET
    status = CASE WHEN r.status = 'pending' AND NOT EXISTS
        (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN 'canceled' ELSE r.status END,
    finished_at = CASE WHEN r.status <> 'pending' OR NOT EXISTS
        (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN r.now END,
    next_attempt_at = CASE WHEN EXISTS
        (SELECT 1 FROM endpoints e WHERE e.id = tasks.endpoint_id) THEN r.next_attempt_at END,
    attempts = r.attempts, last_status_code = r.status_code, last_error = r.error,
    updated_at = r.now, claimed_by = NULL, lease_until = NULL
   FROM unnest(:r_ids::bigint[], :r_statuses::text[], :r_attempts::bigint[], :r_nexts::bigint[], :r_codes::bigint[],
               :r_errors::text[], :r_nows::bigint[])
        AS r(id, status, attempts, next_attempt_at, status_code, error, now)
  WHERE tasks.id = r.id AND (tasks.status COLLATE "C") = 'running'
    AND tasks.claimed_by = :node
 RETURNING tasks.id;
EOF
}

# insert_attempts' statement (the batched form).
attempts_sql() {
    cat <<'EOF'
INSERT INTO attempts (task_id, attempt, started_at, duration_ms, status_code, error, response_body, request_headers)
 SELECT task_id, attempt, started_at, duration_ms, status_code, error, response_body, request_headers
 FROM unnest(:r_ids::int8[], :r_attempts::int8[], :r_nows::int8[], :r_durations::int8[], :r_codes::int8[], :r_errors::text[], :r_bodies::text[], :r_headers::text[])
      WITH ORDINALITY AS a(task_id, attempt, started_at, duration_ms, status_code, error,
                           response_body, request_headers, ord)
 ORDER BY ord;
EOF
}

round_sql() {
    echo "BEGIN;"
    echo "SET LOCAL synchronous_commit = off;"
    echo "\\if :n > 0"
    if [ "$MIX" = round ]; then
        results_with_attempts_sql
    else
        finish_sql
        attempts_sql
    fi
    if [ "$MIX" = checked ] || [ "$MIX" = round ]; then
        cat <<EOF
WITH d AS (
     SELECT * FROM unnest(:all_ids::int8[], :health_at::int8[], :health_nulls::int8[], :health_zeros::int8[], :health_nulls::int8[])
         AS d(id, last_success_at, last_failure_at, failures, first_failure_at)),
 locked AS (
     SELECT e.id FROM endpoints e WHERE e.id IN (SELECT id FROM d)
     ORDER BY e.id FOR NO KEY UPDATE)
 UPDATE endpoints e SET
    last_success_at = coalesce(d.last_success_at, e.last_success_at),
    last_failure_at = coalesce(d.last_failure_at, e.last_failure_at),
    consecutive_failures = CASE WHEN d.last_success_at IS NULL
        THEN e.consecutive_failures + d.failures ELSE d.failures END,
    failing_since = CASE WHEN d.last_success_at IS NULL
        THEN coalesce(e.failing_since, d.first_failure_at) ELSE d.first_failure_at END
   FROM d, locked WHERE e.id = d.id AND locked.id = d.id;
EOF
    else
        for ep in $(seq 1 "$EPR"); do
            cat <<EOF
UPDATE endpoints SET
        last_success_at = coalesce($NOW, last_success_at),
        last_failure_at = coalesce(NULL::bigint, last_failure_at),
        consecutive_failures = CASE WHEN $NOW IS NULL THEN consecutive_failures + 0::bigint ELSE 0::bigint END,
        failing_since = CASE WHEN $NOW IS NULL THEN coalesce(failing_since, NULL::bigint) ELSE NULL::bigint END
 WHERE id = $ep;
EOF
        done
    fi
    echo "\\endif"
    for _ in $(seq 1 "$WALKS"); do
        cat <<EOF
WITH RECURSIVE known AS (
     SELECT k.id, k.floor FROM unnest(:all_ids::int8[], :floors::int8[]) AS k(id, floor)),
 pending AS (
     SELECT :min_id::int8 AS endpoint_id, NULL::int8 AS next_attempt_at, false AS found
     UNION ALL
     SELECT n.endpoint_id, n.next_attempt_at, n.found FROM pending p CROSS JOIN LATERAL (
         SELECT * FROM (
             (SELECT endpoint_id, next_attempt_at, true AS found FROM tasks
               WHERE status = 'pending' AND endpoint_id > p.endpoint_id
                 AND endpoint_id < :max_id AND next_attempt_at IS NOT NULL
                 AND endpoint_id < coalesce((SELECT min(k.id) FROM known k
                                              WHERE k.id > p.endpoint_id), :max_id)
               ORDER BY endpoint_id, next_attempt_at LIMIT 1)
             UNION ALL
             (SELECT k.id, d.next_attempt_at, d.next_attempt_at IS NOT NULL
                FROM known k LEFT JOIN LATERAL (
                    SELECT t.next_attempt_at FROM tasks t
                     WHERE t.status = 'pending' AND t.endpoint_id = k.id
                       AND t.next_attempt_at >= k.floor
                     ORDER BY t.next_attempt_at LIMIT 1) d ON true
               WHERE k.id > p.endpoint_id AND k.id < :max_id
               ORDER BY k.id LIMIT 1)) s
          ORDER BY s.endpoint_id LIMIT 1) n)
 SELECT p.endpoint_id, p.next_attempt_at, e.id IS NOT NULL, e.status = 'enabled',
        e.rate_limit_per_sec, e.max_in_flight
   FROM (SELECT * FROM pending WHERE found LIMIT :walk_limit) p
   LEFT JOIN endpoints e ON e.id = p.endpoint_id
  ORDER BY p.endpoint_id;
EOF
    done
    claim_sql
    echo "\\if :n > 0"
    if [ "$MIX" = round ]; then
        : # the endpoints are held at the generation the claim returned
    elif [ "$MIX" = checked ]; then
        echo "SELECT id, app_id, name, url, method, headers, secret, timeout_ms, retry_policy_id, filter_events, status, created_at, updated_at, rate_limit_per_sec, max_in_flight, previous_secret, previous_secret_expires_at, disabled_reason, last_success_at, last_failure_at, consecutive_failures, filter_payload FROM endpoints WHERE id = ANY(:all_ids::int8[]);"
    else
        for ep in $(seq 1 "$EPR"); do
            echo "SELECT id, app_id, name, url, method, headers, secret, timeout_ms, retry_policy_id, filter_events, status, created_at, updated_at, rate_limit_per_sec, max_in_flight, previous_secret, previous_secret_expires_at, disabled_reason, last_success_at, last_failure_at, consecutive_failures, filter_payload FROM endpoints WHERE id = $ep;"
        done
    fi
    echo "\\endif"
    echo "COMMIT;"
}

# record_attempts' statement: the results, and the attempts of the tasks they recorded.
results_with_attempts_sql() {
    echo "WITH f AS ($(finish_sql | sed 's/;$//')),"
    echo " a AS ($(attempts_sql | sed 's/;$//' | sed 's/ORDER BY ord/WHERE a.task_id IN (SELECT id FROM f) ORDER BY ord/'))"
    echo "SELECT id FROM f;"
}

ideal_publish_sql() {
    cat <<EOF
\set sig random(1, 9223372036854775807)
WITH pair AS (
     INSERT INTO replay_guard (key_id, signature, sent_at, expires_at) VALUES (:key_id, :sig, $NOW, $NOW + 300000)
     ON CONFLICT (sent_at, key_id, signature) DO UPDATE SET expires_at = excluded.expires_at
     WHERE replay_guard.expires_at < $NOW
     RETURNING 1),
 e AS (
     INSERT INTO events (app_id, event_name, event_key, payload, status, task_count, created_at)
     SELECT :app_id, :event_name, NULL, :payload, 'dispatched', $FANOUT, $NOW FROM pair
     RETURNING id, app_id, event_name, event_key, payload, status, task_count, created_at),
 t AS ($(tasks_insert "e.id" ", e"))
 SELECT id, app_id, event_name, event_key, payload, status, task_count, created_at FROM e;
EOF
}

ideal_round_sql() {
    echo "BEGIN;"
    echo "SET LOCAL synchronous_commit = off;"
    echo "\\if :n > 0"
    # The results and their attempts in one statement.
    echo "WITH f AS ($(finish_sql | sed 's/;$//'))"
    attempts_sql | sed 's/FROM unnest(:r_ids::int8\[\]/FROM unnest((SELECT array_agg(id) FROM f)/'
    echo "\\endif"
    claim_sql
    echo "COMMIT;"
}

per_mille() { python3 -c "import sys; print(max(1, round(float(sys.argv[1]) * 1000)))" "$1"; }
if [ "$MIX" = ideal ]; then
    ideal_publish_sql >"$OUT/publish.sql"
    ideal_round_sql >"$OUT/round.sql"
    publishers=(-f "$OUT/publish.sql")
else
    publish_sql >"$OUT/publish.sql"
    round_sql >"$OUT/round.sql"
    echo "SELECT set_config('synchronous_commit', 'off', true), pg_notify(:channel, '');" >"$OUT/notice.sql"
    publishers=(-f "$OUT/publish.sql@1000" -f "$OUT/notice.sql@$(per_mille "$NOTICES")")
fi
# A round claims K tasks in all (IDEAL_BATCH for MIX=ideal), shared by the endpoints.
[ "$MIX" = ideal ] && K=$IDEAL_BATCH
limit=$(( (K + FANOUT - 1) / FANOUT ))
round_size=$(( limit * FANOUT ))
LIMITS="{$(rep "$limit" | tr -d '{}')}"
FLOORS="{$(rep 0 | tr -d '{}')}"
HEADERS='[["content-type","application/json"],["user-agent","webhookd/0.1"],["webhook-id","msg_0000000000000000000000000"],["webhook-timestamp","1764150000"],["webhook-signature","v1,0000000000000000000000000000000000000000000="],["traceparent","00-00000000000000000000000000000000-0000000000000000-01"]]'
PAYLOAD='{"sent_us":1764150000000000,"seq":12345}'
PAYLOADS=$(python3 -c 'import json, sys; p = sys.argv[1]; print("{" + ",".join([json.dumps(p)] * int(sys.argv[2])) + "}")' "$PAYLOAD" "$FANOUT")
defines=(-D key_id=key_floor -D app_id=app_floor -D event_name=bench.floor -D default_attempts=5
         -D held=1 -D "payload=$PAYLOAD" -D node=node-floor -D channel=webhookd_tasks
         -D "t_apps=$(rep app_floor)" -D "t_nulls=$(rep NULL)" -D "t_endpoints=$ALL_IDS"
         -D "t_kinds=$(rep event)" -D "t_payloads=$PAYLOADS" -D "t_attempts=$(rep 5)"
         -D "t_traces=$(rep 0123456789abcdef0123456789abcdef)" -D "t_parents=$(rep 0123456789abcdef)"
         -D "t_flags=$(rep 1)" -D "all_ids=$ALL_IDS" -D "limits=$LIMITS" -D "floors=$FLOORS"
         -D claim_limit="$limit" -D min_id=-9223372036854775808 -D max_id=9223372036854775807
         -D walk_limit=64 -D "headers=$HEADERS" -D n=0 -D r_floor=0
         -D "health_nulls=$(rep NULL)" -D "health_zeros=$(rep 0)" -D "health_at=$(rep 1764150000000)")
# The walk's floors: the claim's, for every endpoint.
sed -i "s/:floors::int8\[\]/(SELECT array_agg(:r_floor::int8) FROM unnest(:all_ids::int8[]))/" "$OUT/round.sql"

# One phase: a pgbench run, PostgreSQL's and pgbench's CPU (pidstat, this server's processes
# only), WAL bytes and statements; leaves PHASE_SECS (pgbench's own time) and PHASE_CPU (the
# server's CPU-seconds) and writes OUT/NAME.{txt,pidstat,statements,wal}.
phase() {
    local name=$1
    shift
    q "SELECT pg_stat_statements_reset()" >/dev/null
    local wal0
    wal0=$(q "SELECT pg_current_wal_lsn()")
    pidstat -u -h 1 -C 'postgres|pgbench' >"$OUT/$name.pidstat" 2>/dev/null &
    pid_pidstat=$!
    trap 'kill "$pid_pidstat" 2>/dev/null || true; pg_server_stop' EXIT
    "${RUN[@]}" "$PGBENCH" -h "$PGDIR" -p "$PORT" -U webhookd -n -M prepared "${defines[@]}" "$@" floor \
        >"$OUT/$name.txt" 2>"$OUT/$name.err" &
    local pid_bench=$!
    echo "$PGPID" >"$OUT/$name.pids"
    while kill -0 "$pid_bench" 2>/dev/null; do
        ps -o pid= --ppid "$PGPID" >>"$OUT/$name.pids" || true
        sleep 0.5
    done
    wait "$pid_bench" || { echo "pg-floor: pgbench ($name) failed:" >&2; tail -20 "$OUT/$name.err" >&2; exit 1; }
    kill "$pid_pidstat" 2>/dev/null || true
    wait "$pid_pidstat" 2>/dev/null || true
    q "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$wal0')::bigint" >"$OUT/$name.wal"
    q "SELECT calls, rows, round(total_exec_time::numeric, 1), round((shared_blks_hit + shared_blks_read)::numeric / greatest(calls, 1), 1), left(regexp_replace(query, '\s+', ' ', 'g'), 120) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'floor') ORDER BY calls DESC LIMIT 30" >"$OUT/$name.statements"
}

# 1. Publishing alone, SECS seconds: what a delivery's publish costs, and the backlog for 2.
echo "== pg-floor: MIX=$MIX FANOUT=$FANOUT CLIENTS=$CLIENTS SECS=$SECS K=$K NOTICES=$NOTICES WALKS=$WALKS EPR=$EPR (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
phase publish -c "$CLIENTS" -j 2 -T "$SECS" "${publishers[@]}"
created=$(qf "SELECT count(*) FROM tasks WHERE run_at > 20000")
# 2. The dispatcher alone draining that backlog, its rounds of K tasks (webhookd's size), on one
# connection as the dispatcher thread has: what a delivery's rounds cost.
rounds=$(( created / round_size ))
# Statistics that know the backlog (autovacuum's would by now in a server that has run a while):
# planned on none, the claim joins it by a scan of every pending task.
qf "ANALYZE tasks" >/dev/null
phase deliver -c 1 -t "$rounds" -f "$OUT/round.sql"
delivered=$(qf "SELECT count(*) FROM tasks WHERE status = 'success' AND attempts > 0 AND run_at > 20000")
echo "== done (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
grep -E '^(number of (transactions|failed)|latency average|tps|SQL script)' "$OUT/publish.txt" "$OUT/deliver.txt"
python3 - "$OUT" "$FANOUT" "$SECS" "$created" "$delivered" <<'PY'
import os, re, sys
sys.path.insert(0, "scripts")
from pidstat_cpu import cpu_seconds
out, fanout, secs, created, delivered = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def cpu(name):
    ours = set(open(os.path.join(out, name + ".pids")).read().split())
    counted, _ = cpu_seconds(os.path.join(out, name + ".pidstat"), ours, only={"postgres"})
    return {prog: counted.get(prog, 0.0) for prog in ("postgres", "pgbench")}
def statements(name):
    n = 0
    for line in open(os.path.join(out, name + ".statements")):
        c = line.split("|")
        if len(c) >= 5 and c[4].strip() not in ("BEGIN", "COMMIT"):
            n += int(c[0])
    return n
def pgbench_secs(name):
    text = open(os.path.join(out, name + ".txt")).read()
    n = int(re.search(r"number of transactions actually processed: (\d+)", text).group(1))
    tps = float(re.search(r"tps = ([\d.]+)", text).group(1))
    return n / tps
pub, dlv = cpu("publish"), cpu("deliver")
dsecs = pgbench_secs("deliver")
wal = [int(open(os.path.join(out, n + ".wal")).read()) for n in ("publish", "deliver")]
pub_ms = pub["postgres"] * 1000 / created
dlv_ms = dlv["postgres"] * 1000 / delivered
print(f"\npublish: {created // fanout:,} events, {created:,} tasks in {secs:.0f} s: {created / secs:,.0f} deliveries/s published; "
      f"PostgreSQL {pub_ms:.3f} CPU-ms per delivery (pgbench {pub['pgbench'] * 1000 / created:.3f}); "
      f"{statements('publish') / created:.2f} statements, {wal[0] / created:,.0f} WAL bytes per delivery")
print(f"deliver: {delivered:,} tasks in {dsecs:.1f} s on one connection: {delivered / dsecs:,.0f} deliveries/s; "
      f"PostgreSQL {dlv_ms:.3f} CPU-ms per delivery (pgbench {dlv['pgbench'] * 1000 / delivered:.3f}); "
      f"{statements('deliver') / delivered:.2f} statements, {wal[1] / delivered:,.0f} WAL bytes per delivery")
print(f"floor: PostgreSQL {pub_ms + dlv_ms:.3f} CPU-ms per delivery: at most {2000 / (pub_ms + dlv_ms):,.0f} deliveries/s on 2 cores "
      f"with nothing else running; both sides in turn as measured: {1 / (secs / created + dsecs / delivered):,.0f} deliveries/s")
PY
cp "$PGDIR/server.log" "$OUT/" 2>/dev/null || true
echo "(scripts, statements, samples and the server's log in $OUT)" >&2
