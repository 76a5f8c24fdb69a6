#!/usr/bin/env bash
# Which b-trees the WAL pages of a publish run belong to: one `bench publish` run of N events
# at fan-out F (N at full rate, then N/2 at half rate) against BIN on a fresh database, with
# every WAL frame kept (a reader holds the snapshot the server started from, so no checkpoint
# copies a frame back and the WAL is never rewound; `--wal-limit-mb` is raised out of the way).
# Afterwards each frame's page number is looked up in `dbstat` (the final file) and the frames
# are cut into transactions at their commit frames. A transaction is counted as
#   publish          it writes `events` and not `attempts` (a publish group, with any claim
#                    a delivery round made in it),
#   publish+results  it writes both (a round's results joined a publish group),
#   results          `attempts` without `events` (a round's results, committed alone),
#   claim            `tasks` without either (a round's claim, committed alone),
#   other            the rest (replay records of reads, health, pruning).
# Printed: pages per event by b-tree and kind, and each kind's commits and median pages.
#
#   scripts/bench-wal-btrees.sh BIN [EVENTS [FANOUT]]
#   SERVE_ARGS="--sqlite-sync normal" scripts/bench-wal-btrees.sh target/release/webhookd
#
# The WAL of the run stays on disk until the end: about 35 KB per event at fan-out 1.
# No perf needed (the `perf stat` below only satisfies publish_under_perf); needs the harness:
# cargo build --release --example bench.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/publish-under-perf.sh
. scripts/publish-under-perf.sh
bin=$1 events=${2:-5000} fanout=${3:-1}
tool=${TOOL:-$bin}
tmp=$(mktemp -d)
reader=
trap '[ -n "$reader" ] && kill "$reader" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
key=$(WEBHOOKD_LOG=warn "$tool" keys create --db "$tmp/db.sqlite" --app bench --name btrees --json)
# The reader: a read transaction on the file as the key left it, held until told to stop.
python3 - "$tmp/db.sqlite" "$tmp/reading" <<'PY' &
import os, sqlite3, sys, time
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN")
con.execute("SELECT count(*) FROM sqlite_master").fetchall()
open(sys.argv[2], "w").close()
while os.path.exists(sys.argv[2]):
    time.sleep(0.1)
con.execute("COMMIT")
PY
reader=$!
while [ ! -e "$tmp/reading" ]; do sleep 0.05; done
SERVE_ARGS="${SERVE_ARGS:-} --wal-limit-mb 1000000" \
    publish_under_perf "$bin" "$tool" "$tmp" "$key" "$events" "$fanout" stat -o /dev/null -e task-clock
# Copied while the reader still holds the WAL (the last connection to close deletes it).
mkdir "$tmp/kept"
cp "$tmp/db.sqlite" "$tmp/db.sqlite-wal" "$tmp/kept/"
rm "$tmp/reading"
wait "$reader"
reader=

python3 - "$tmp/kept/db.sqlite" "$tmp/bench.json" <<'PY'
import collections, json, sqlite3, statistics, struct, sys
db, run = sys.argv[1], json.load(open(sys.argv[2]))
events = run["published"] + run["half_deliveries_expected"] / run["fanout"]
wal = open(db + "-wal", "rb").read()
page_size = struct.unpack(">I", wal[8:12])[0]
salts = wal[16:24]
frames, txns, current = 0, [], []
for at in range(32, len(wal) - 24 - page_size + 1, 24 + page_size):
    pgno, commit = struct.unpack(">II", wal[at:at + 8])
    if wal[at + 8:at + 16] != salts:
        break
    frames += 1
    current.append(pgno)
    if commit:
        txns.append(current)
        current = []
# The page -> b-tree map of the final file (dbstat reads through the WAL just kept).
con = sqlite3.connect(db)
owner = dict((p, n) for n, p in con.execute("SELECT name, pageno FROM dbstat"))
owner[1] = "(page 1: schema, free list)"
def kind(names):
    if "events" in names:
        return "publish+results" if "attempts" in names else "publish"
    if "attempts" in names:
        return "results"
    if "tasks" in names:
        return "claim"
    return "other"
by_tree = collections.defaultdict(collections.Counter)
per_commit = collections.defaultdict(list)
for t in txns:
    names = [owner.get(p, "(freed or free-list page)") for p in t]
    k = kind(set(names))
    per_commit[k].append(len(t))
    for n in names:
        by_tree[n][k] += 1
kinds = ["publish", "publish+results", "results", "claim", "other"]
print(f"events {events:.0f}, delivered/s {run['delivered_per_s']:.0f}: WAL frames {frames} "
      f"= {frames / events:.2f} pages/event, {len(txns)} commits ({events / max(1, len(txns)):.2f} events/commit)")
for k in kinds:
    c = per_commit[k]
    if c:
        print(f"  {k:16} {len(c):6} commits, {sum(c) / events:5.2f} pages/event, "
              f"median {statistics.median(c):.0f} pages/commit (p90 {sorted(c)[len(c) * 9 // 10]})")
print(f"{'pages/event by b-tree':34}" + "".join(f"{k:>16}" for k in kinds) + f"{'all':>8}")
for name, c in sorted(by_tree.items(), key=lambda kv: -sum(kv[1].values())):
    print(f"  {name:32}" + "".join(f"{c[k] / events:16.3f}" for k in kinds) + f"{sum(c.values()) / events:8.3f}")
PY
