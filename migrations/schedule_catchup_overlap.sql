-- Schedules: what to do with runs missed while the server was down (`catchup`), whether to
-- fire while an earlier firing's task is still open (`overlap`), and how many runs were not
-- fired because of either (`skipped_runs`). docs/design.md §13. Existing schedules keep today's
-- behaviour: `latest` and `allow`.
ALTER TABLE schedules ADD COLUMN catchup TEXT NOT NULL DEFAULT 'latest';
ALTER TABLE schedules ADD COLUMN overlap TEXT NOT NULL DEFAULT 'allow';
ALTER TABLE schedules ADD COLUMN skipped_runs INTEGER NOT NULL DEFAULT 0;
-- The overlap check: is a task of this schedule for this endpoint still open?
CREATE INDEX tasks_schedule_open ON tasks (schedule_id, endpoint_id)
    WHERE schedule_id IS NOT NULL AND status IN ('pending', 'running');
