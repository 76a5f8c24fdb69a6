-- The twin of migrations/event_task_range.sql, which lets SQLite find an event's tasks by
-- their id range instead of by `tasks_event`. PostgreSQL keeps `tasks_event` and its queries;
-- the two columns are added so that version N has SQLite's shape (and the copy from SQLite
-- carries them), and are left NULL by PostgreSQL's publishes. Adding a NULL column rewrites
-- no row.
ALTER TABLE events ADD COLUMN first_task_id BIGINT;
ALTER TABLE events ADD COLUMN last_task_id BIGINT;

-- PostgreSQL only: an endpoint's tasks indexed by id, as SQLite has them since task_counts,
-- instead of by status. `(endpoint_id, status)` matched the claims' and the walk's
-- `status = 'pending' AND endpoint_id = …` as well as the pending-only `tasks_endpoint_due`
-- does, and a plan made while `tasks` had no statistics, or statistics taken while nothing
-- was pending, took it: every claim then read the endpoint's whole backlog and sorted it
-- (BENCHMARKS.md, pgsteady and session 12). By id it serves what it is for (an endpoint's
-- tasks listed newest first, and deleted with it), and cannot serve a claim in due order.
-- The in-order claim's test for a task of the endpoint still running gets a partial index of
-- its own.
DROP INDEX tasks_endpoint;
CREATE INDEX tasks_endpoint ON tasks (endpoint_id, id);
CREATE INDEX tasks_endpoint_running ON tasks (endpoint_id) WHERE status = 'running';
