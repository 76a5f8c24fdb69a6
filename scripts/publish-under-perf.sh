# Sourced by scripts/bench-wal-pages.sh and scripts/bench-wal-commits.sh: one `bench publish`
# run against a webhookd serving a fresh SQLite file, with a `perf` command attached to the
# server for the run.
#
#   publish_under_perf BIN TOOL DIR KEY_JSON EVENTS FANOUT PERF_ARGS...
#
# Serves DIR/db.sqlite with BIN (its key already made with TOOL: KEY_JSON is `keys create
# --json`'s output; SERVE_ARGS adds serve flags), waits until healthy, starts
# `perf PERF_ARGS... -p <server>`, runs `bench publish` (BENCH or the release harness; N
# events at full rate, then N/2 at half rate) into DIR/bench.json, then stops perf and the
# server. The server's log is DIR/log. Needs set -euo pipefail in the caller.
publish_under_perf() {
    local bin=$1 tool=$2 dir=$3 key=$4 events=$5 fanout=$6 port pid perf
    shift 6
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    # shellcheck disable=SC2086 # SERVE_ARGS is a list of words
    WEBHOOKD_LOG=warn "$bin" serve --db "$dir/db.sqlite" --listen "127.0.0.1:$port" ${SERVE_ARGS:-} 2>"$dir/log" &
    pid=$!
    for _ in $(seq 1 100); do "$tool" healthcheck --url "http://127.0.0.1:$port" 2>/dev/null && break; sleep 0.1; done
    perf "$@" -p "$pid" &
    perf=$!
    sleep 0.5
    "${BENCH:-target/release/examples/bench}" publish --events "$events" --fanout "$fanout" --json --url "http://127.0.0.1:$port" \
        --key-id "$(echo "$key" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key_id"])')" \
        --secret "$(echo "$key" | python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')" \
        >"$dir/bench.json" 2>"$dir/bench.log" || { cat "$dir/bench.log" "$dir/log" >&2; kill "$pid" "$perf"; exit 1; }
    kill -INT "$perf"
    wait "$perf" 2>/dev/null || true
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}
