-- The twin of migrations/tasks_app_dropped.sql, kept as a step so that both schemas keep one
-- version number, and left without a change: PostgreSQL keeps `tasks_app (app_id, id)`.
-- SQLite dropped it to write one index fewer per task (WAL pages per event) and counts its
-- totals from `task_counts`; PostgreSQL counts a list's total with `count(*)`, and the count by
-- app alone reads `tasks_app` as an index-only scan (60 MB at 1M tasks) where without it the
-- planner scans the table (2.4x slower at 900,000 tasks of one app: BENCHMARKS.md, noapp).
SELECT 1;
