#!/usr/bin/env bash
# WAL pages written per published event, A/B: binaries run interleaved (A, B, A, B, ...), each
# on a fresh database, a `publish` run of N events at fan-out F against it while `perf stat`
# counts, in the kernel, the server's 24-byte pwrite64 calls: SQLite writes each WAL frame as
# its 24-byte header then its page, so that count is the number of pages written to the WAL
# (checkpoints write the database file in whole pages, not counted).
#
# Also the server's CPU time per event (perf's task-clock over the same interval). Per event
# means per event published: `bench publish` runs N events at full rate, then N/2 at half
# the rate (before 25 Nov 2026 this script divided by N alone, which read 1.5x high).
#
#   scripts/bench-wal-pages.sh ROUNDS BIN_A BIN_B [EVENTS [FANOUT]]
#   SERVE_ARGS="--sqlite-sync normal" scripts/bench-wal-pages.sh 3 /tmp/webhookd-main target/release/webhookd
#
# C_SQL="DROP TRIGGER …" adds a run C of BIN_B per round with that SQL applied (sqlite3 shell)
# to its database before the server starts: one lever of B taken out, to measure the others alone.
# Needs perf with tracepoint access (root) and the harness: cargo build --release --example bench.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/publish-under-perf.sh
. scripts/publish-under-perf.sh
rounds=$1 a=$2 b=$3 events=${4:-20000} fanout=${5:-1}
tool=${TOOL:-$a} # the older binary makes the key: a newer one would upgrade the file past A
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() { # run LABEL BINARY [SQL]: one run, "pages events cpu_ms" appended to $out/LABEL
    local label=$1 bin=$2 sql=${3:-} maker tmp key published
    tmp=$(mktemp -d)
    # A run with SQL: B makes the key (its schema), then the SQL, before the server opens it.
    maker=$tool
    if [ -n "$sql" ]; then maker=$bin; fi
    key=$(WEBHOOKD_LOG=warn "$maker" keys create --db "$tmp/db.sqlite" --app bench --name wal --json)
    if [ -n "$sql" ]; then sqlite3 "$tmp/db.sqlite" "$sql"; fi
    publish_under_perf "$bin" "$tool" "$tmp" "$key" "$events" "$fanout" \
        stat -x, -o "$tmp/perf" -e syscalls:sys_enter_pwrite64 --filter 'count == 24' -e task-clock
    # Events published: the full-rate run's, then the half-rate run's the harness adds.
    published=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(round(d["published"] + d["half_deliveries_expected"] / d["fanout"]))' "$tmp/bench.json")
    echo "$(grep pwrite64 "$tmp/perf" | cut -d, -f1) $published $(grep task-clock "$tmp/perf" | cut -d, -f1)" >>"$out/$label"
    rm -rf "$tmp"
}

for i in $(seq 1 "$rounds"); do
    echo "round $i/$rounds: A $(basename "$a")" >&2
    run A "$a"
    echo "round $i/$rounds: B $(basename "$b")" >&2
    run B "$b"
    if [ -n "${C_SQL:-}" ]; then
        echo "round $i/$rounds: C $(basename "$b") + SQL" >&2
        run C "$b" "$C_SQL"
    fi
done

python3 - "$out" "$a" "$b" "$fanout" <<'PY'
import os, statistics, sys
out, names, fanout = sys.argv[1], {"A": sys.argv[2], "B": sys.argv[3], "C": sys.argv[3] + " + C_SQL"}, sys.argv[4]
base = None
for label in "ABC":
    path = os.path.join(out, label)
    if not os.path.exists(path):
        continue
    rows = [line.split() for line in open(path)]
    pages = [int(p) / int(n) for p, n, _ in rows]
    cpu = [float(c) * 1000 / int(n) for _, n, c in rows]
    mp, mc = statistics.median(pages), statistics.median(cpu)
    if base is None:
        base = (mp, mc)
    print(f"fan-out {fanout} {label} {names[label]}: WAL pages/event {mp:.2f} {[round(x, 2) for x in pages]} "
          f"({mp / base[0]:.2f} of A); server CPU us/event {mc:.0f} {[round(x) for x in cpu]} ({mc / base[1]:.2f} of A)")
PY
