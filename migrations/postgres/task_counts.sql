-- Twin of migrations/task_counts.sql. No task_counts table here: PostgreSQL keeps counting
-- `total` (docs/dev/storage.md "Task totals and the tasks indexes": one counter row per
-- (app, status) updated by every status change would serialize the commits of every node).
-- tasks_due goes as on SQLite (no query reads it). tasks_leased stays (the lease rescue reads
-- it), and so does tasks_endpoint (endpoint_id, status): the claim of an in-order endpoint's
-- task looks for that endpoint's running tasks through it.
DROP INDEX tasks_due;
