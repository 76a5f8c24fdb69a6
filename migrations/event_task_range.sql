-- An event's tasks found by their ids instead of by `tasks_event` (docs/dev/storage.md, "An
-- event's tasks by id range"): a publish inserts its tasks in one call, with ids taken in a
-- row from the block held in memory, so the event row names the first and last of them
-- (NULL: no task). `tasks_event` was written by every publish's commit: one WAL page fewer
-- per publish commit. The tasks that name an event without being its publish's (a resent
-- copy: `manual`) are the only ones `tasks_event_copies` holds, so a publish never writes it.
-- The task list and the bulk retry by event, and events' retention, read both.
-- The twin, migrations/postgres/event_task_range.sql, adds the same two columns (PostgreSQL
-- keeps `tasks_event` and never writes them; the copy to PostgreSQL carries them along).
ALTER TABLE events ADD COLUMN first_task_id INTEGER;
ALTER TABLE events ADD COLUMN last_task_id INTEGER;
-- The events held so far: their publish's tasks' lowest and highest ids, read through
-- `tasks_event` in event order before it goes (an event whose tasks were all pruned keeps NULL).
UPDATE events SET first_task_id = t.first_id, last_task_id = t.last_id
    FROM (SELECT event_id, min(id) AS first_id, max(id) AS last_id FROM tasks
          WHERE event_id IS NOT NULL AND task_type = 'event' GROUP BY event_id) AS t
    WHERE events.id = t.event_id;
CREATE INDEX tasks_event_copies ON tasks (event_id, id)
    WHERE event_id IS NOT NULL AND task_type <> 'event';
DROP INDEX tasks_event;
