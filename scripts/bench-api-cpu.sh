#!/usr/bin/env bash
# The server's CPU per signed read, A/B: binaries run interleaved (A, B, …, A, B, …), each on a
# fresh SQLite database, `bench api --clients 8 --duration 4` against it (4 s of signed
# `GET /v1/endpoints/{id}`, then 4 s of `GET /v1/tasks?status=failed`); the server's utime +
# stime (from /proc/PID/stat) over the run divided by the reads answered. Less sensitive to
# other load on the machine than a rate is.
#
#   scripts/bench-api-cpu.sh ROUNDS BIN...
#   BENCH=path (default target/release/examples/bench); CLIENTS=n (default 8)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=$1
shift
bench=${BENCH:-target/release/examples/bench}
[ -x "$bench" ] || { echo "bench-api-cpu.sh: build the harness first: cargo build --release --example bench" >&2; exit 2; }
tck=$(getconf CLK_TCK)
for _ in $(seq 1 "$rounds"); do
    for bin in "$@"; do
        tmp=$(mktemp -d)
        key=$(WEBHOOKD_LOG=warn "$bin" keys create --db "$tmp/db.sqlite" --app bench --name cpu --json)
        kid=$(echo "$key" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key_id"])')
        secret=$(echo "$key" | python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        WEBHOOKD_LOG=warn "$bin" serve --db "$tmp/db.sqlite" --listen "127.0.0.1:$port" 2>"$tmp/log" &
        pid=$!
        for _ in $(seq 1 100); do "$bin" healthcheck --url "http://127.0.0.1:$port" 2>/dev/null && break; sleep 0.1; done
        before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
        load=$(cut -d' ' -f1 /proc/loadavg)
        "$bench" api --url "http://127.0.0.1:$port" --key-id "$kid" --secret "$secret" \
            --clients "${CLIENTS:-8}" --duration 4 --json >"$tmp/out" 2>/dev/null
        after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
        kill "$pid"
        wait "$pid" 2>/dev/null || true
        python3 - "$bin" "$load" "$before" "$after" "$tck" "$tmp/out" <<'PY'
import json, sys
bin, load, before, after, tck, out = sys.argv[1:]
run = [json.loads(l) for l in open(out) if l.startswith("{")][-1]
reads = (run["get_endpoint_per_s"] + run["list_failed_tasks_per_s"]) * run["duration_s"]
cpu_s = (int(after) - int(before)) / int(tck)
print(f"{bin} load={load} get/s={run['get_endpoint_per_s']:.0f} "
      f"list/s={run['list_failed_tasks_per_s']:.0f} server_cpu_us_per_read={cpu_s / reads * 1e6:.1f}")
PY
        rm -rf "$tmp"
    done
done
