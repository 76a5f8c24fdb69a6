-- One index fewer written by every task insert: `tasks_app (app_id, id)` goes. It was the page
-- of the task list by app alone (or by type), newest first; `tasks_app_status (app_id, status,
-- id)` holds the same entries grouped by status, so that list now reads one arm per status
-- from it, each in id order, merged (a compound `SELECT … UNION ALL … ORDER BY id DESC LIMIT`,
-- which SQLite merges arm by arm: no sort, about a page of rows read). Every other reader
-- finds what it needs in `tasks_app_status` (`app_id` is its prefix) or by `rowid`
-- (docs/dev/storage.md, "The list by app alone without tasks_app"). The twin,
-- migrations/postgres/tasks_app_dropped.sql, changes nothing: PostgreSQL keeps the index for
-- the count(*) of a list by app alone (SQLite keeps its totals in task_counts).
DROP INDEX tasks_app;
