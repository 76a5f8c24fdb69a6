#!/usr/bin/env python3
"""Where the CPU of a fan-out-1 publish run went: reads `perf script -F comm,pid,tid,ip,sym,dso`
(dwarf call chains) and charges each sample to the component of the frame nearest its leaf that
names one (allocator, libc and kernel frames are charged to their caller's component; the
`kernel` column is the share of those samples that were in the kernel).
usage: scripts/perf-breakdown.py SERVER_PID PERIOD_MS EVENTS < script.txt  (BENCHMARKS.md, "fanout1")"""
import re, sys, collections

server_pid, period_ms, events = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
RULES = [  # component, regex on one frame
    ("fsync of the -wal file (group commit, full)", r"store::sqlite::store::(group_sync|fsync_upto)"),
    ("COMMIT of a group (WAL frames written)", r"store::sqlite::store::end_group"),
    ("group commit: lock, savepoint, wait", r"store::sqlite::store::(lock_writer|wait_for_group|write_grouped|run_cached)|SqliteStore as webhookd::store::Store>::write"),
    ("replay record (signedget's)", r"store::sqlite::replay::|webhookd::store::replay::"),
    ("auth: key lookup", r"store::sqlite::keys::|webhookd::auth::.*key|KeyCache|key_generation"),
    ("auth: HMAC verify", r"hmac::|sha2::|webhookd::auth::verify|webhookd::signing::verify"),
    ("publish: task row (insert + trigger + indexes)", r"TaskQueries for webhookd::store::sqlite::store::SqliteTx>::insert_tasks"),
    ("publish: event row", r"EventQueries for webhookd::store::sqlite::store::SqliteTx>::insert_event"),
    ("publish: event re-read (SELECT + payload parse)", r"EventQueries for webhookd::store::sqlite::store::SqliteTx>::get_event|store::sqlite::events::from_row"),
    ("publish: app's targets (memory + generation check)", r"webhookd::targets::"),
    ("dispatch: claim + fair walk", r"claim_endpoint_tasks|endpoints_with_pending|in_order_head|delivery::fair::"),
    ("dispatch: result recording", r"finish_attempt|insert_attempt|delivery::record|delivery::health|store::sqlite::health::|AttemptQueries"),
    ("dispatch: targets load / hand-out", r"webhookd::delivery::(targets|hand_out)|EndpointQueries"),
    ("send: ureq request/reply", r"ureq::|ureq_proto::"),
    ("send: signing + headers", r"webhookd::signing::|delivery::send::(delivery_headers|recorded_headers)|trace::SpanContext"),
    ("send: other (attempt bookkeeping)", r"webhookd::delivery::send::|webhookd::delivery::attempt"),
    ("worker hand-off (job queue)", r"webhookd::delivery::(next_job|work|sent_one|JobQueue)"),
    ("condvar waits and wake-ups (group members, job queue)", r"Condvar"),
    ("JSON (serde_json)", r"serde_json::|serde::"),
    ("tracing / spans", r"tracing::|tracing_core::|tracing_subscriber::|webhookd::spans::|webhookd::trace::"),
    ("metrics", r"prometheus_client::|webhookd::metrics::"),
    ("API handler other (routing, body, reply)", r"webhookd::api::|webhookd::server::handle_blocking|webhookd::error::"),
    ("hyper (HTTP parse/serve, socket I/O)", r"hyper::|hyper_util::|http_body|webhookd::server::|webhookd::wire::|webhookd::request_id::"),
    ("tokio runtime (incl. spawn_blocking hand-off)", r"tokio::"),
]
RULES = [(n, re.compile(p)) for n, p in RULES]
SQLITE = re.compile(r"^sqlite3|rusqlite::|^walCheckpoint|^pager")
FALLBACK = [(n, re.compile(p)) for n, p in [  # frames of a sample whose libc caller was not unwound
    ("libc/kernel: futex (thread wake-ups and waits)", r"futex"),
    ("libc/kernel: disk I/O (write, fsync)", r"blk_|virtio|ext4|fdatasync|vfs_write|filemap|submit_bio|pwrite"),
    ("libc/kernel: loopback TCP, epoll", r"tcp_|sock_|epoll|__libc_send|__libc_recv|inet_"),
    ("libc: allocator (malloc/free)", r"malloc|_int_free|free\b|tcache|unlink_chunk|consolidate|realloc"),
    ("libc: memcpy/memcmp", r"mem(cpy|cmp|move|set)"),
    ("kernel: scheduler, page faults", r"schedule|page|irq"),
]]

def kind(comm, group):
    if group == "harness":
        return {"bench": "harness: load clients", "receiver": "harness: receiver"}.get(comm, "harness: other")
    if comm.startswith("tokio-r"):
        return "server: API threads (hyper, handlers, blocking pool)"
    if comm.startswith("delivery-disp"):
        return "server: delivery dispatcher"
    if comm.startswith("delivery-send"):
        return "server: delivery senders"
    if comm.startswith("wal-checkpoint"):
        return "server: WAL checkpointer"
    return "server: other threads"

by_kind = collections.Counter(); by_comp = collections.Counter(); kern = collections.Counter()
comp_all = collections.Counter(); comp_all_k = collections.Counter()
head, frames = None, []
def flush():
    global head, frames
    if head is None: return
    comm, pid = head
    group = "server" if pid == server_pid else "harness"
    k = kind(comm, group)
    by_kind[k] += 1
    c = None
    for sym, dso in frames:  # leaf first
        if "kernel" in dso: continue
        hit = next((n for n, rx in RULES if rx.search(sym)), None)
        if hit: c = hit; break
    if c is None and any(SQLITE.search(s) for s, d in frames):
        c = "SQLite (caller not unwound)"
    if c is None:  # the unwinder stopped in libc: say what the kernel or libc was doing
        joined = " ".join(s for s, d in frames)
        c = next((n for n, rx in FALLBACK if rx.search(joined)), "unattributed (stack not unwound)")
    in_k = bool(frames) and "kernel" in frames[0][1]
    by_comp[(k, c)] += 1; kern[(k, c)] += in_k
    if group == "server":
        comp_all[c] += 1; comp_all_k[c] += in_k
    head, frames = None, []
hre = re.compile(r"^(\S.*?)\s+(\d+)/(\d+)\s*$")
for line in sys.stdin:
    if not line.strip(): flush(); continue
    if not line[0].isspace():
        flush(); m = hre.match(line.rstrip("\n"))
        head = (m.group(1), m.group(2)) if m else None
        continue
    parts = line.strip().split(None, 1)
    if len(parts) == 2:
        rest = parts[1]; i = rest.rfind(" (")
        frames.append((rest[:i] if i >= 0 else rest, rest[i + 2:-1] if i >= 0 else ""))
flush()
us = lambda n: n * period_ms * 1000 / events
total = sum(by_kind.values())
server = sum(v for k, v in by_kind.items() if k.startswith("server"))
print(f"samples {total} (period {period_ms} ms), events {events}: all {us(total):.0f} µs/event, server {us(server):.0f} µs/event ({100*server/total:.0f}%)\n")
print("| thread kind | share of all CPU | µs / event |")
print("|---|---|---|")
for k, v in by_kind.most_common():
    print(f"| {k} | {100*v/total:.1f}% | {us(v):.0f} |")
print("\n| server component (all server threads) | µs / event | share of server CPU | in kernel |")
print("|---|---|---|---|")
for c, v in comp_all.most_common():
    print(f"| {c} | {us(v):.1f} | {100*v/server:.1f}% | {100*comp_all_k[c]/v:.0f}% |")
for k, _ in by_kind.most_common():
    print(f"\n{k}:")
    for (kk, c), v in sorted(by_comp.items(), key=lambda x: -x[1]):
        if kk == k and v * 1000 >= by_kind[k] * 5:
            print(f"    {c:52} {us(v):6.1f} µs/event  {100*v/by_kind[k]:5.1f}%  kernel {100*kern[(kk,c)]/v:3.0f}%")
