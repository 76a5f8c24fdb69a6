#!/usr/bin/env bash
# Where PostgreSQL's WAL per delivery goes, by table and index (docs/scaling.md: "which table or
# index becomes the limit"): the PostgreSQL twin of scripts/bench-wal-btrees.sh.
#
# Starts the private server of the benchmarks (scripts/pg-server.sh: fsync, full_page_writes and
# synchronous_commit on), runs one `bench publish` on one node against it, and reads every WAL
# record the run wrote with pg_waldump. A record is charged to the relation of its first block
# reference (a heap insert to its table, an index insert to its index; a commit has none), its
# full-page image bytes counted apart. Relations are named from the run's database while it
# exists (the harness drops it when it stops).
#
# Usage: scripts/bench-pg-wal.sh [FANOUT [EVENTS]]   (defaults 1 and 20000)
# Env: BENCH (harness binary, default target/release/examples/bench), WEBHOOKD_BENCH_BINARY
#      (the server binary the harness spawns), OUT (folder for the raw files, default a temp one).
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C
FANOUT=${1:-1}
EVENTS=${2:-20000}
BENCH=${BENCH:-target/release/examples/bench}
OUT=${OUT:-$(mktemp -d /tmp/bench-pg-wal.XXXXXX)}
mkdir -p "$OUT"
[ -x "$BENCH" ] || { echo "bench-pg-wal: no harness at $BENCH (cargo build --release --examples)" >&2; exit 2; }

# shellcheck source=scripts/pg-server.sh
source scripts/pg-server.sh
# Checkpoints (the harness's DROP DATABASE makes one) would recycle the run's segments before
# pg_waldump reads them.
PG_CONF_EXTRA="wal_keep_size = 8GB"
pg_server_start
[ -x "$PGBIN/pg_waldump" ] || { echo "bench-pg-wal: pg_waldump is missing" >&2; exit 2; }

RUN_DB="datname LIKE 'bench\_b%'"
q "CHECKPOINT" >/dev/null
wal0=$(q "SELECT pg_current_wal_lsn()")
"$BENCH" publish --fanout "$FANOUT" --events "$EVENTS" --db "$URL" --nodes 1 --json \
    >"$OUT/run.json" 2>"$OUT/run.log" &
pid_bench=$!
# The run's relations by file node, sampled while the database exists (a file node changes
# only on a rewrite, which a run does not do; every sample is kept).
while kill -0 "$pid_bench" 2>/dev/null; do
    db=$(q "SELECT datname FROM pg_database WHERE $RUN_DB LIMIT 1") || db=
    [ -n "$db" ] && "${RUN[@]}" "$PGBIN/psql" -h "$PGDIR" -p "$PORT" -U webhookd -d "$db" -AtXqc \
        "SELECT pg_relation_filenode(c.oid), c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND c.relkind IN ('r', 'i', 't')
            AND pg_relation_filenode(c.oid) IS NOT NULL" >>"$OUT/relations" 2>/dev/null || true
    sleep 1
done
wait "$pid_bench" || { echo "bench-pg-wal: the run failed:" >&2; tail -5 "$OUT/run.log" >&2; exit 1; }
wal1=$(q "SELECT pg_current_wal_lsn()")
"$PGBIN/pg_waldump" -p "$PGDIR/data/pg_wal" -s "$wal0" -e "$wal1" >"$OUT/waldump" 2>"$OUT/waldump.err" || true

python3 - "$OUT" "$FANOUT" <<'PY'
import json, re, sys, collections
out, fanout = sys.argv[1], int(sys.argv[2])
names = {}
for line in open(f"{out}/relations"):
    node, _, name = line.rstrip("\n").partition("|")
    if node and name:
        names[node] = name
run = [json.loads(l) for l in open(f"{out}/run.json") if l.startswith("{")]
delivered = int(sum(r.get("deliveries_received", 0) + r.get("half_deliveries_received", 0) for r in run)) or None
record = re.compile(r"rmgr: (\S+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+).*?desc: (\S+)(.*)")
rel = re.compile(r"blkref #0: rel \d+/\d+/(\d+)")
fpw = re.compile(r"FPW")
by = collections.defaultdict(lambda: [0, 0, 0])  # relation -> records, bytes, FPI records
kinds = collections.Counter()
total = 0
for line in open(f"{out}/waldump"):
    m = record.search(line)
    if not m:
        continue
    rmgr, tot, desc, rest = m.group(1), int(m.group(3)), m.group(4), m.group(5)
    r = rel.search(rest)
    target = names.get(r.group(1), f"(other: {r.group(1)})") if r else f"({rmgr} {desc})"
    entry = by[target]
    entry[0] += 1
    entry[1] += tot
    entry[2] += 1 if fpw.search(rest) else 0
    kinds[f"{rmgr}/{desc}"] += 1
    total += tot
if not delivered:
    sys.exit("bench-pg-wal: the run reported no deliveries")
print(f"fan-out {fanout}: {delivered:,} deliveries, WAL {total / delivered:,.0f} bytes and "
      f"{sum(e[0] for e in by.values()) / delivered:.1f} records per delivery (pg_waldump)\n")
print("| relation | records / delivery | bytes / delivery | share | full-page images |")
print("|---|---|---|---|---|")
for name, (n, b, f) in sorted(by.items(), key=lambda kv: -kv[1][1]):
    if b / total < 0.002:
        continue
    print(f"| {name} | {n / delivered:.2f} | {b / delivered:,.0f} | {100 * b / total:.1f}% | {f} |")
print("\nrecord kinds per delivery:", ", ".join(f"{k} {v / delivered:.2f}" for k, v in kinds.most_common(12)))
PY
echo "raw files: $OUT" >&2
