-- Per-task lease (docs/design.md §16, docs/dev/storage.md): which node claimed a running task and
-- until when its claim holds. Twin of migrations/postgres/lease.sql; SQLite leaves both
-- columns empty (one process owns the file), PostgreSQL rescues running tasks whose lease ran
-- out.
ALTER TABLE tasks ADD COLUMN claimed_by TEXT;
ALTER TABLE tasks ADD COLUMN lease_until INTEGER;
-- Running tasks by lease end: the rescue of expired leases.
CREATE INDEX tasks_leased ON tasks (lease_until) WHERE status = 'running';
