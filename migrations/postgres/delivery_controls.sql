-- Twin of migrations/delivery_controls.sql (docs/design.md §12): per-endpoint limits, secret
-- rotation, and the indexes of the fair claim (one endpoint at a time, round-robin).
ALTER TABLE endpoints ADD COLUMN rate_limit_per_sec DOUBLE PRECISION;
ALTER TABLE endpoints ADD COLUMN max_in_flight BIGINT;
-- The secret before the last rotation, still signing until previous_secret_expires_at (ms).
ALTER TABLE endpoints ADD COLUMN previous_secret TEXT;
ALTER TABLE endpoints ADD COLUMN previous_secret_expires_at BIGINT;
-- An endpoint's due tasks, earliest first: the claim seeks from one endpoint to the next.
CREATE INDEX tasks_endpoint_due ON tasks (endpoint_id, next_attempt_at, id) WHERE status = 'pending';
-- An in-order endpoint's head: its pending tasks in the order they became due.
CREATE INDEX tasks_endpoint_order ON tasks (endpoint_id, run_at, id) WHERE status = 'pending';
