-- Twin of migrations/visibility.sql (docs/design.md §11): endpoint health kept by the delivery pool,
-- and the index of `GET /tasks?status=retrying`.
ALTER TABLE endpoints ADD COLUMN disabled_reason TEXT;
ALTER TABLE endpoints ADD COLUMN last_success_at BIGINT;
ALTER TABLE endpoints ADD COLUMN last_failure_at BIGINT;
ALTER TABLE endpoints ADD COLUMN consecutive_failures BIGINT NOT NULL DEFAULT 0;
ALTER TABLE endpoints ADD COLUMN failing_since BIGINT;
UPDATE endpoints SET disabled_reason = 'manual' WHERE status = 'disabled';
CREATE INDEX tasks_retrying ON tasks (app_id, status, id) WHERE status = 'pending' AND attempts > 0;
