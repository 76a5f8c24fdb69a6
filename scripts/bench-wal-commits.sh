#!/usr/bin/env bash
# Which commits write the WAL pages of a publish run, and how many events each one carries:
# one `bench publish` run of N events at fan-out F (N at full rate, then N/2 at half rate)
# against BIN on a fresh database, while `perf record` logs, in the kernel, each of the
# server's 24-byte pwrite64 calls (SQLite writes each WAL frame as its 24-byte header, then
# its page: one call per page written) and each fdatasync, with thread and time.
#
#   scripts/bench-wal-commits.sh BIN [EVENTS [FANOUT]]
#   SERVE_ARGS="--sqlite-sync normal" scripts/bench-wal-commits.sh target/release/webhookd
#
# A commit writes its frames back to back from one thread, so the frames are grouped into
# commits by thread and by a gap under 60 µs; commits are then counted by the thread that
# wrote them: `tokio-rt-worker` (an API thread ended the group: publishes, with any delivery
# round that joined them), `delivery-dispat` (a delivery round that committed its own group),
# the checkpointer and the pruners. Printed: pages per event, events per commit, fsyncs,
# and per thread kind its commits, pages per event, and pages per commit (median, p90).
# The grouping by time is a heuristic: a thread preempted inside a commit splits it in two,
# so on a loaded machine read the commit counts as upper bounds and the page counts as exact.
# Needs perf with tracepoint access (root) and the harness: cargo build --release --example bench.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/publish-under-perf.sh
. scripts/publish-under-perf.sh
bin=$1 events=${2:-10000} fanout=${3:-1}
tool=${TOOL:-$bin}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
key=$(WEBHOOKD_LOG=warn "$tool" keys create --db "$tmp/db.sqlite" --app bench --name commits --json)
publish_under_perf "$bin" "$tool" "$tmp" "$key" "$events" "$fanout" \
    record -q -o "$tmp/perf.data" -e syscalls:sys_enter_pwrite64 --filter 'count == 24' \
    -e syscalls:sys_enter_fdatasync
perf script -i "$tmp/perf.data" -F comm,tid,time,event 2>/dev/null >"$tmp/script.txt"

python3 - "$tmp/script.txt" "$tmp/bench.json" <<'PY'
import collections, json, sys
run = json.load(open(sys.argv[2]))
# Events published: the full-rate run's, then the half-rate run's the harness adds.
events = run["published"] + run["half_deliveries_expected"] / run["fanout"]
commits, fsyncs, last = [], collections.Counter(), None
for line in open(sys.argv[1]):
    words = line.split()
    # "COMM TID TIME: EVENT:" (COMM may hold spaces)
    at = next((i for i, w in enumerate(words) if w.endswith(":") and w[:-1].replace(".", "").isdigit()), None)
    if at is None or at < 2 or at + 1 >= len(words):
        continue
    comm, tid, t, event = " ".join(words[: at - 1]), words[at - 1], float(words[at][:-1]), words[at + 1]
    if "fdatasync" in event:
        fsyncs[comm] += 1
        continue
    if last and last[0] == tid and t - last[1] < 60e-6:
        commits[-1][1] += 1
    else:
        commits.append([comm, 1])
    last = (tid, t)
pages = sum(n for _, n in commits)
print(f"events {events:.0f}, delivered/s {run['delivered_per_s']:.0f}: WAL pages/event {pages / events:.2f}, "
      f"commits {len(commits)} ({events / max(1, len(commits)):.2f} events/commit), "
      f"fsyncs {sum(fsyncs.values())} ({events / max(1, sum(fsyncs.values())):.2f} events/fsync)")
by = collections.defaultdict(list)
for comm, n in commits:
    by[comm].append(n)
for comm, ns in sorted(by.items(), key=lambda kv: -sum(kv[1])):
    ns.sort()
    print(f"  {comm:16s} commits {len(ns):6d}  pages/event {sum(ns) / events:5.2f}  "
          f"pages/commit median {ns[len(ns) // 2]} p90 {ns[int(len(ns) * 0.9)]}  fsyncs {fsyncs[comm]}")
PY
