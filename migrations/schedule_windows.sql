-- Schedule windows and jitter (docs/design.md §19): the schedule fires only at instants in
-- [starts_at, ends_at] (ms; null = open), and each firing's tasks are due at a random moment
-- up to jitter_sec after the instant. Twin of migrations/postgres/schedule_windows.sql.
ALTER TABLE schedules ADD COLUMN starts_at INTEGER;
ALTER TABLE schedules ADD COLUMN ends_at INTEGER;
ALTER TABLE schedules ADD COLUMN jitter_sec INTEGER NOT NULL DEFAULT 0;
