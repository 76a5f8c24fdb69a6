-- Trace context of each task (docs/API.md, "Traces"; docs/design.md §20): the W3C trace id its
-- deliveries carry, the span its own spans hang under (the request or schedule firing that
-- made it), and the trace flags. Twin of migrations/postgres/traces.sql. Tasks made before
-- this step keep NULL: their deliveries start a fresh trace per attempt.
ALTER TABLE tasks ADD COLUMN trace_id TEXT;
ALTER TABLE tasks ADD COLUMN trace_parent TEXT;
ALTER TABLE tasks ADD COLUMN trace_flags INTEGER;
