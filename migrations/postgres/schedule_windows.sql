-- Twin of migrations/schedule_windows.sql (docs/design.md §19): a schedule's window
-- [starts_at, ends_at] (ms; null = open) and the jitter of its firings' tasks.
ALTER TABLE schedules ADD COLUMN starts_at BIGINT;
ALTER TABLE schedules ADD COLUMN ends_at BIGINT;
ALTER TABLE schedules ADD COLUMN jitter_sec BIGINT NOT NULL DEFAULT 0;
