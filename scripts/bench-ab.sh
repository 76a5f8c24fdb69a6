#!/usr/bin/env bash
# A/B benchmark of two webhookd binaries with the bench harness, run back to back and
# interleaved (A, B, A, B, ...) so that load from other work on the machine hits both alike.
#
#   scripts/bench-ab.sh ROUNDS BIN_A BIN_B BENCH_ARGS...
#   scripts/bench-ab.sh 3 target/release/webhookd dist/webhookd-x86_64-unknown-linux-musl publish --fanout 1
#
# Each run starts the binary on a fresh database (key made with `webhookd keys create` before
# the first start) and points `bench --url` at it. Prints, per figure, the median of each binary
# and B/A. BIN_C=path adds a third binary to every round (A, B, C, A, B, C, ...) and a C/A
# column (e.g. a candidate fix next to the base and the regressed build). Needs the harness built: cargo build --release --example bench (or BENCH=path).
# The key and the readiness check use BIN_B's CLI (TOOL=path to change), so that BIN_A may be
# an older build without `healthcheck`. SERVE_ARGS adds arguments to every `serve`
# (e.g. SERVE_ARGS="--sqlite-sync normal").
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=$1 a=$2 b=$3
shift 3
bench=${BENCH:-target/release/examples/bench}
tool=${TOOL:-$b}
[ -x "$bench" ] || { echo "bench-ab.sh: build the harness first: cargo build --release --example bench" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() { # run LABEL BINARY: one bench run against BINARY, JSON lines appended to $out/LABEL
    local label=$1 bin=$2 tmp port key pid
    shift 2
    tmp=$(mktemp -d)
    key=$(WEBHOOKD_LOG=warn "$tool" keys create --db "$tmp/db.sqlite" --app bench --name ab --json)
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    WEBHOOKD_LOG=warn "$bin" serve --db "$tmp/db.sqlite" --listen "127.0.0.1:$port" ${SERVE_ARGS:-} 2>"$tmp/log" &
    pid=$!
    for _ in $(seq 1 100); do "$tool" healthcheck --url "http://127.0.0.1:$port" 2>/dev/null && break; sleep 0.1; done
    "$bench" "$@" --json --url "http://127.0.0.1:$port" \
        --key-id "$(echo "$key" | python3 -c 'import json,sys; print(json.load(sys.stdin)["key_id"])')" \
        --secret "$(echo "$key" | python3 -c 'import json,sys; print(json.load(sys.stdin)["secret"])')" \
        >>"$out/$label" 2>"$tmp/bench.log" || { cat "$tmp/bench.log" "$tmp/log" >&2; kill "$pid"; exit 1; }
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -rf "$tmp"
}

for i in $(seq 1 "$rounds"); do
    echo "round $i/$rounds: A $(basename "$a")" >&2
    run A "$a" "$@"
    echo "round $i/$rounds: B $(basename "$b")" >&2
    run B "$b" "$@"
    if [ -n "${BIN_C:-}" ]; then
        echo "round $i/$rounds: C $(basename "$BIN_C")" >&2
        run C "$BIN_C" "$@"
    fi
done

python3 - "$out/A" "$out/B" "$(basename "$a")" "$(basename "$b")" "${BIN_C:+$out/C}" "$(basename "${BIN_C:-none}")" <<'PY'
import json, statistics, sys
def load(path):
    figures = {}
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        for k, v in rec.items():  # figures and numeric params, side by side
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                figures.setdefault((rec["scenario"], k), []).append(v)
    return figures
a, b = load(sys.argv[1]), load(sys.argv[2])
c = load(sys.argv[5]) if sys.argv[5] else None
head = f"{'scenario':10} {'figure':36} {'A: ' + sys.argv[3]:>24} {'B: ' + sys.argv[4]:>24} {'B/A':>6}"
if c is not None:
    head += f" {'C: ' + sys.argv[6]:>24} {'C/A':>6}"
print(head)
for key in a:
    if key not in b or (c is not None and key not in c):
        continue
    ma, mb = statistics.median(a[key]), statistics.median(b[key])
    ratio = f"{mb / ma:.2f}" if ma else "-"
    line = f"{key[0]:10} {key[1]:36} {ma:>24.1f} {mb:>24.1f} {ratio:>6}"
    runs = f"(A {a[key]}, B {b[key]}"
    if c is not None:
        mc = statistics.median(c[key])
        line += f" {mc:>24.1f} {(f'{mc / ma:.2f}' if ma else '-'):>6}"
        runs += f", C {c[key]}"
    print(f"{line}   {runs})")
PY
