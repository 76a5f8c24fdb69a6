-- Twin of migrations/lease.sql (docs/design.md §16): the node holding a running task and when its
-- claim ends (ms). A node claims with lease_until = now + the endpoint's timeout + a margin;
-- a running task whose lease ended goes back to pending (its node is gone or stuck).
ALTER TABLE tasks ADD COLUMN claimed_by TEXT;
ALTER TABLE tasks ADD COLUMN lease_until BIGINT;
-- Running tasks by lease end: the rescue of expired leases.
CREATE INDEX tasks_leased ON tasks (lease_until) WHERE status = 'running';
