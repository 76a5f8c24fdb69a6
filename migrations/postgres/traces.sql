-- Twin of migrations/traces.sql (docs/design.md §20): the trace id a task's deliveries carry,
-- the span its own spans hang under, and the trace flags; NULL for tasks made before it.
ALTER TABLE tasks ADD COLUMN trace_id TEXT;
ALTER TABLE tasks ADD COLUMN trace_parent TEXT;
ALTER TABLE tasks ADD COLUMN trace_flags BIGINT;
