#!/usr/bin/env bash
# Server-side instructions per request under callgrind (deterministic, unlike wall clock on a
# loaded machine): scripts/bench-ir.sh BIN N prints the instructions (Ir, all server threads)
# per request of N sequential signed GET /v1/endpoints/{id}, GET /v1/tasks?status=failed and
# POST /v1/events (fan-out 1 to a local receiver; includes the delivery), after 10 warm-up
# requests each. TOOL=path: the CLI making the key and requests (default BIN); KEEP=dir keeps
# the callgrind dumps (use an unstripped build, e.g. CARGO_PROFILE_RELEASE_STRIP=none, for
# callgrind_annotate). Needs valgrind and python3. BENCHMARKS.md, store interface A/B.
set -euo pipefail
bin=$1 n=$2
tool=${TOOL:-$bin}
tmp=$(mktemp -d)
key=$(WEBHOOKD_LOG=warn "$tool" keys create --db "$tmp/db.sqlite" --app bench --name ab --json)
export WEBHOOKD_KEY_ID=$(echo "$key" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key_id"])')
export WEBHOOKD_SECRET=$(echo "$key" | python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 - "$rport" >/dev/null 2>&1 <<'PY' &
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
rpid=$!
export WEBHOOKD_URL="http://127.0.0.1:$port"
WEBHOOKD_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$bin" serve --db "$tmp/db.sqlite" --listen "127.0.0.1:$port" 2>"$tmp/log" &
pid=$!
for _ in $(seq 1 300); do "$tool" healthcheck --url "$WEBHOOKD_URL" 2>/dev/null && break; sleep 0.2; done
api() { WEBHOOKD_LOG=warn "$tool" api "$@" >/dev/null; }
id=$(WEBHOOKD_LOG=warn "$tool" api POST /v1/endpoints "{\"name\":\"ir\",\"url\":\"http://127.0.0.1:$rport/hook\",\"filter_events\":\"ir.ev\"}" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("data", d)["id"])')
measure() { # LABEL METHOD PATH [BODY]
    local label=$1; shift
    for _ in $(seq 1 10); do api "$@"; done
    sleep 0.5
    callgrind_control -z "$pid" >/dev/null
    for _ in $(seq 1 "$n"); do api "$@"; done
    sleep 1  # deliveries of the last events
    callgrind_control -d "$label" "$pid" >/dev/null
    local f; f=$(ls -t "$tmp"/cg.out* | head -1)
    local ir; ir=$(grep -m1 '^summary:\|^totals:' "$f" | awk '{print $2}')
    echo "$label $((ir / n))"
}
measure get_endpoint GET "/v1/endpoints/$id"
measure list_failed GET "/v1/tasks?status=failed"
measure publish POST /v1/events '{"event_name":"ir.ev","payload":{"a":1}}'
kill "$pid" "$rpid"; wait "$pid" 2>/dev/null || true
[ -n "${KEEP:-}" ] && cp "$tmp"/cg.out* "$KEEP"/ ; rm -rf "$tmp"
