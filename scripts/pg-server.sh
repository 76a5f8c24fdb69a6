# A private, tuned PostgreSQL server for the benchmark scripts (scripts/bench-pg.sh,
# scripts/pg-floor.sh): sourced, not run. One copy of how the figures' server is made, so runs
# of different scripts compare.
#
# pg_server_start: initdb on a temp folder (as the `postgres` user when run as root), a free
# loopback port, the configuration below, a database `bench` with pg_stat_statements. Sets
#   PGBIN   the newest PostgreSQL's bin folder     PGDIR  the server's folder (socket, log)
#   RUN     the prefix to run its tools as          PORT   its TCP port on 127.0.0.1
#   PASSWORD, URL (postgres://webhookd:…@127.0.0.1:PORT/bench), PGPID (the postmaster)
# and installs pg_server_stop as the EXIT trap. Env: SYNC (synchronous_commit, default on),
# PG_CONF_EXTRA (lines appended to postgresql.conf), PG_KEEP_LOG (a path the server's log is
# copied to when it stops: e.g. auto_explain's plans).
# q SQL: one statement on `bench` through the socket, unaligned, no headers.

PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)

pg_server_stop() {
    "${RUN[@]}" "$PGBIN/pg_ctl" -D "$PGDIR/data" -m fast -w stop >/dev/null 2>&1 || true
    [ -n "${PG_KEEP_LOG:-}" ] && cp "$PGDIR/server.log" "$PG_KEEP_LOG" 2>/dev/null
    rm -rf "$PGDIR"
}

pg_server_start() {
    [ -x "$PGBIN/initdb" ] || { echo "no PostgreSQL server (apt-get install -y postgresql)" >&2; exit 2; }
    PGDIR=$(mktemp -d /tmp/webhookd-bench-pg.XXXXXX)
    RUN=()
    if [ "$(id -u)" = 0 ]; then
        chown postgres: "$PGDIR"
        RUN=(runuser -u postgres --)
    fi
    trap pg_server_stop EXIT
    PASSWORD=pw-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
    printf '%s' "$PASSWORD" >"$PGDIR/pwfile"
    chmod 600 "$PGDIR/pwfile"
    [ ${#RUN[@]} -gt 0 ] && chown postgres: "$PGDIR/pwfile"
    "${RUN[@]}" "$PGBIN/initdb" -D "$PGDIR/data" -U webhookd --pwfile "$PGDIR/pwfile" \
        --auth-host=scram-sha-256 --auth-local=trust -E UTF8 --locale=C >/dev/null
    rm -f "$PGDIR/pwfile"
    PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # Tuned for this machine (2 cores, 24 GB, one SSD-backed disk): memory for the working set,
    # checkpoints far apart, durability left on.
    cat >>"$PGDIR/data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$PGDIR'
max_connections = 300
shared_buffers = 1GB
effective_cache_size = 8GB
work_mem = 16MB
maintenance_work_mem = 256MB
wal_buffers = 64MB
max_wal_size = 8GB
min_wal_size = 1GB
checkpoint_timeout = 15min
checkpoint_completion_target = 0.9
random_page_cost = 1.1
jit = off
fsync = on
full_page_writes = on
synchronous_commit = ${SYNC:-on}
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.max = 10000
${PG_CONF_EXTRA:-}
EOF
    "${RUN[@]}" "$PGBIN/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -w -t 60 start >/dev/null
    "${RUN[@]}" "$PGBIN/psql" -h "$PGDIR" -p "$PORT" -U webhookd -d postgres -qc 'CREATE DATABASE bench'
    "${RUN[@]}" "$PGBIN/psql" -h "$PGDIR" -p "$PORT" -U webhookd -d bench -qc 'CREATE EXTENSION pg_stat_statements'
    URL="postgres://webhookd:$PASSWORD@127.0.0.1:$PORT/bench"
    PGPID=$(head -1 "$PGDIR/data/postmaster.pid")
}

q() { "${RUN[@]}" "$PGBIN/psql" -h "$PGDIR" -p "$PORT" -U webhookd -d bench -AtXqc "$1"; }
