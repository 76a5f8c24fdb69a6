-- The twin of migrations/event_task_range.sql, which lets SQLite find an event's tasks by
-- their id range instead of by `tasks_event`. PostgreSQL keeps `tasks_event` and its queries;
-- the two columns are added so that version N has SQLite's shape (and the copy from SQLite
-- carries them), and are left NULL by PostgreSQL's publishes. Adding a NULL column rewrites
-- no row.
ALTER TABLE events ADD COLUMN first_task_id BIGINT;
ALTER TABLE events ADD COLUMN last_task_id BIGINT;
