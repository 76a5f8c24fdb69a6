#!/usr/bin/env bash
# Property-based fuzzing of a live webhookd from openapi.json with schemathesis (docs/design.md §14).
# Installs python3-venv (Debian) and schemathesis (PyPI, into .venv-ci/) when missing, starts a
# server on a temporary database and a free loopback port, creates a key, and runs schemathesis
# with a hook that signs every request (tests/openapi/sign_hook.py). Fails on any 5xx, any reply
# that does not match the document (schema, status code, content type) or any failure the
# checks report. Prints "openapi:" lines with the figures. One worker: with several, hypothesis
# (under Python 3.11) sometimes fails in ast.parse from two threads at once, a tool error.
#
# Env: WEBHOOKD_BIN (a built binary; default: cargo build), OPENAPI_NO_INSTALL=1 (use what is
# installed), OPENAPI_MAX_EXAMPLES (per operation, default 40), OPENAPI_SEED.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
venv="$root/.venv-ci"
version="4.32.5"

if [ -z "${OPENAPI_NO_INSTALL:-}" ] && { [ ! -x "$venv/bin/schemathesis" ] || [ ! -x "$venv/bin/openapi-spec-validator" ]; }; then
    if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
        echo "== installing python3-venv"
        apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    fi
    echo "== installing schemathesis $version and openapi-spec-validator into .venv-ci/"
    [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install -q "schemathesis==$version" "openapi-spec-validator==0.9.0"
fi
# The document against the OpenAPI 3.1 meta-schema (a second opinion beside cargo test's checks).
if [ -x "$venv/bin/openapi-spec-validator" ]; then
    "$venv/bin/openapi-spec-validator" openapi.json | sed 's/^/openapi: /'
else
    echo "openapi: openapi-spec-validator is not installed; the meta-schema check did not run"
fi
if [ -x "$venv/bin/schemathesis" ]; then
    schemathesis="$venv/bin/schemathesis"
else
    schemathesis=$(command -v schemathesis)
fi

bin="${WEBHOOKD_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --quiet
    bin="$root/target/debug/webhookd"
fi

tmp=$(mktemp -d)
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

db="$tmp/fuzz.sqlite"
# A free port, then the server on it (retried once should another process take it meanwhile).
for try in 1 2; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$bin" serve --db "$db" --listen "127.0.0.1:$port" >"$tmp/server.log" 2>&1 &
    server_pid=$!
    url="http://127.0.0.1:$port"
    for _ in $(seq 100); do
        if python3 -c "import urllib.request,sys; urllib.request.urlopen('$url/healthz', timeout=1)" 2>/dev/null; then
            break
        fi
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$server_pid" 2>/dev/null && break
    server_pid=""
    [ "$try" = 2 ] && { cat "$tmp/server.log"; echo "openapi: the server did not start"; exit 1; }
done

# The key is made while the server runs (the `keys` commands share the file with it).
key_json=$("$bin" keys create --db "$db" --app fuzz --name schemathesis --json)
key_id=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["key_id"])' <<<"$key_json")
secret=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])' <<<"$key_json")

# A few records with the ids 1 and 2, which schemathesis' boundary values (minimum: 1) hit, so
# that the operations on a record reach their handlers instead of stopping at 404. The
# endpoints point at a closed loopback port: deliveries fail fast and tasks become retryable.
seed() {
    WEBHOOKD_URL="$url" WEBHOOKD_KEY_ID="$key_id" WEBHOOKD_SECRET="$secret" \
        "$bin" api "$@" >/dev/null
}
seed POST /v1/retries/policies '{"name":"seed","max_attempts":2,"backoff_type":"fixed","initial_delay_sec":0}'
seed POST /v1/endpoints '{"name":"seed","url":"http://127.0.0.1:9/hook","retry_policy_id":1,"secret":"whsec_c2VlZA=="}'
seed POST /v1/endpoints '{"name":"seed-orders","url":"http://127.0.0.1:9/orders","filter_events":"order.*"}'
seed POST /v1/schedules '{"name":"seed","cron_expr":"*/5 * * * *","endpoint_ids":[1]}'
seed POST /v1/schedules '{"name":"seed-all","cron_expr":"@hourly","timezone":"Europe/Berlin"}'
seed POST /v1/events '{"event_name":"order.created","payload":{"n":1}}'
seed POST /v1/events '{"event_name":"invoice.paid"}'
seed POST /v1/tasks '{"endpoint_id":1,"run_at":"2099-01-01T00:00:00Z"}'

counts="$tmp/counts.json"
started=$(date +%s)
set +e
WEBHOOKD_FUZZ_KEY_ID="$key_id" WEBHOOKD_FUZZ_SECRET="$secret" WEBHOOKD_FUZZ_COUNTS="$counts" \
PYTHONPATH="$root/tests/openapi" SCHEMATHESIS_HOOKS=sign_hook \
    "$schemathesis" run "$url/v1/openapi.json" --url "$url" \
    --checks "${OPENAPI_CHECKS:-not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance,unsupported_method}" \
    --max-examples "${OPENAPI_MAX_EXAMPLES:-40}" \
    ${OPENAPI_SEED:+--seed "$OPENAPI_SEED"} \
    --workers 1 --request-timeout 30 --no-color \
    2>&1 | tee "$tmp/schemathesis.log"
status=${PIPESTATUS[0]}
set -e
elapsed=$(( $(date +%s) - started ))

if grep -q "internal error" "$tmp/server.log"; then
    echo "openapi: the server logged internal errors:"
    grep "internal error" "$tmp/server.log" | head -20
    status=1
fi
python3 - "$counts" "$elapsed" "$status" <<'PY'
import json, sys
path, elapsed, status = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    counts = json.load(open(path))
except OSError:
    counts = {"signed": 0, "statuses": {}}
statuses = ", ".join(f"{k}: {v}" for k, v in sorted(counts["statuses"].items()))
print(f"openapi: schemathesis sent {counts['signed']} requests in {elapsed} s; replies by status: {statuses}")
print(f"openapi: schemathesis exit status {status} ({'no failures' if status == '0' else 'FAILURES, see above'})")
PY
exit "$status"
