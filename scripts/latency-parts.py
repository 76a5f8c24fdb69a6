#!/usr/bin/env python3
"""The parts of each delivery's publish→arrival latency (scripts/latency-parts.sh).
usage: scripts/latency-parts.py TIMINGS TASKS
TIMINGS: `phase task_id sent_us at_us` (the harness, WEBHOOKD_BENCH_TIMINGS);
TASKS: `task_id created_at_ms started_at_ms duration_ms` (the database)."""
import sys

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else float("nan")

tasks = {}
for line in open(sys.argv[2]):
    f = line.split()
    if len(f) == 4:
        tasks[int(f[0])] = (int(f[1]), int(f[2]), int(f[3]))
phases = {}
for line in open(sys.argv[1]):
    phase, task_id, sent_us, at_us = line.split()
    t = tasks.get(int(task_id))
    if t is None:
        continue
    created, started, _ = t
    sent, at = int(sent_us) / 1000, int(at_us) / 1000
    phases.setdefault(phase, []).append((at - sent, created - sent, started - created, at - started))
names = ["total", "send -> created_at", "created_at -> attempt", "attempt -> arrival"]
for phase in ("full", "half"):
    rows = phases.get(phase, [])
    if not rows:
        continue
    print(f"{phase} rate: {len(rows)} deliveries (ms)")
    print(f"  {'part':24} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7}  slowest 1% (mean)")
    slow = sorted(rows)[-max(1, len(rows) // 100):]
    for i, name in enumerate(names):
        xs = [r[i] for r in rows]
        mean_slow = sum(r[i] for r in slow) / len(slow)
        print(f"  {name:24} {pct(xs, 50):7.1f} {pct(xs, 90):7.1f} {pct(xs, 99):7.1f} {max(xs):7.1f}  {mean_slow:7.1f}")
