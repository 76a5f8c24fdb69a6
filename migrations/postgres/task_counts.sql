-- Twin of migrations/task_counts.sql: the same narrower indexes. No task_counts table here:
-- PostgreSQL keeps counting `total` (docs/dev/storage.md "Task totals and the tasks indexes":
-- one counter row per (app, status) updated by every status change would serialize the
-- commits of every node), and keeps tasks_leased, which its lease rescue reads.
DROP INDEX tasks_endpoint;
CREATE INDEX tasks_endpoint ON tasks (endpoint_id, id);
DROP INDEX tasks_due;
