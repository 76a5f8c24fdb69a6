-- docs/design.md §11 "Seeing what happens": endpoint health kept by the delivery pool, and an index
-- for `GET /tasks?status=retrying`.

-- Why a disabled endpoint is disabled: 'manual', 'gone' (a 410 reply) or 'failing'
-- (auto-disable); NULL while enabled.
ALTER TABLE endpoints ADD COLUMN disabled_reason TEXT;
ALTER TABLE endpoints ADD COLUMN last_success_at INTEGER;
ALTER TABLE endpoints ADD COLUMN last_failure_at INTEGER;
-- Attempts failed since the last success.
ALTER TABLE endpoints ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0;
-- When the first failure of the current streak happened (NULL when there is no streak): the
-- start of the `--disable-failing-after-hours` window.
ALTER TABLE endpoints ADD COLUMN failing_since INTEGER;

-- Endpoints disabled before this version were disabled by hand or by a 410; the difference
-- was not recorded, so they read as 'manual'.
UPDATE endpoints SET disabled_reason = 'manual' WHERE status = 'disabled';

-- Pending tasks that have failed at least one attempt (`status=retrying`), newest first. The
-- same columns as tasks_app_status, so SQLite prefers this smaller index for that query (with
-- (app_id, id) it picked tasks_app_status and read every pending task of the app).
CREATE INDEX tasks_retrying ON tasks (app_id, status, id) WHERE status = 'pending' AND attempts > 0;
