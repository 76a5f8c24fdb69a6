#!/usr/bin/env python3
# The task list's page statements of main (one statement over `tasks_app`) and of the merged
# arms over `tasks_app_status` (schema step `tasks_app_dropped`), timed on two copies of a
# 1M-task SQLite file in one process, interleaved: median of 5 rounds of 200 executions each;
# asserts both give the same ids. Used for BENCHMARKS.md, "`tasks_app` dropped".
#
#   scripts/bench-task-list.py OLD.db NEW.db
#
# OLD.db: `OLD_BIN keys create --db OLD.db --app bench …`, then fill it in the sqlite3 shell:
#   WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 1000000)
#   INSERT INTO tasks (app_id, event_id, endpoint_id, task_type, payload, status, run_at, attempts,
#     max_attempts, last_status_code, finished_at, created_at, updated_at)
#   SELECT CASE WHEN i % 10 = 0 THEN 'other' ELSE 'bench' END, i, 1,
#     CASE WHEN i % 3 = 0 THEN 'manual' ELSE 'event' END, '{"order":12345}',
#     CASE WHEN i % 100 = 1 THEN 'failed' WHEN i > 999000 AND i % 2 = 0 THEN 'pending' ELSE 'success' END,
#     1700000000000 + i, 1, 5, 200, 1700000000005 + i, 1700000000000 + i, 1700000000005 + i FROM n;
# NEW.db: a copy of it opened once by the new binary (`NEW_BIN keys list --db NEW.db` upgrades it).
import sqlite3, statistics, sys, time
C = "id, app_id, schedule_id, event_id, endpoint_id, task_type, payload, status, run_at, attempts, max_attempts, next_attempt_at, last_status_code, last_error, finished_at, created_at, updated_at, trace_id"
ST = ["pending", "running", "success", "failed", "canceled"]
def a_sql(extra): return f"SELECT {C} FROM tasks WHERE app_id = ?1{extra} ORDER BY id DESC LIMIT ?2 + 0 OFFSET ?3 + 0"
def b_sql(extra): return f"SELECT {C} FROM tasks WHERE id IN (" + " UNION ALL ".join(f"SELECT id FROM tasks WHERE app_id = ?1{extra} AND status = '{s}'" for s in ST) + " ORDER BY id DESC LIMIT ?2 + 0 OFFSET ?3 + 0) ORDER BY id DESC"
cases = [("by app, page 1", "", 0), ("by app, page 50", "", 980), ("by type, page 1", " AND task_type = 'manual'", 0), ("by type, page 50", " AND task_type = 'manual'", 980)]
dbs = {"A": (sys.argv[1], a_sql), "B": (sys.argv[2], b_sql)}
conns = {k: sqlite3.connect(p) for k, (p, _) in dbs.items()}
for c in conns.values(): c.execute("PRAGMA cache_size = -16000")
N, ROUNDS = 200, 5
res = {}
for name, extra, off in cases:
    out = {}
    for k in "AB": out[k] = conns[k].execute(dbs[k][1](extra), ("bench", 20, off)).fetchall()
    assert [r[0] for r in out["A"]] == [r[0] for r in out["B"]], name
    for r in range(ROUNDS):
        for k in "AB":
            sql = dbs[k][1](extra); c = conns[k]
            t = time.perf_counter()
            for _ in range(N): c.execute(sql, ("bench", 20, off)).fetchall()
            res.setdefault((name, k), []).append((time.perf_counter() - t) / N * 1e6)
# the by-type total (counted): count(*) over the app
for k in "AB":
    c = conns[k]; sql = "SELECT count(*) FROM tasks WHERE app_id = ?1 AND task_type = 'manual'"
    for r in range(3):
        t = time.perf_counter(); c.execute(sql, ("bench",)).fetchall(); res.setdefault(("by type, total", k), []).append((time.perf_counter() - t) * 1e6)
for name in [c[0] for c in cases] + ["by type, total"]:
    a, b = statistics.median(res[(name, "A")]), statistics.median(res[(name, "B")])
    print(f"{name:18} A {a:9.1f} us  B {b:9.1f} us  B/A {b/a:.2f}   A {[round(x) for x in res[(name,'A')]]} B {[round(x) for x in res[(name,'B')]]}")
