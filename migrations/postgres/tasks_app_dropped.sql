-- The twin of migrations/tasks_app_dropped.sql: `tasks_app (app_id, id)` goes, one index fewer
-- written by every task insert. The task list by app alone (or by type) reads one index scan
-- of `tasks_app_status (app_id, status, id)` per status, in id order, under a Merge Append;
-- counts by app read `tasks_app_status` on its `app_id` prefix.
DROP INDEX tasks_app;
