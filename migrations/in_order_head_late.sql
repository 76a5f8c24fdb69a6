-- One pending-only index fewer written by every task: `tasks_endpoint_order (endpoint_id,
-- run_at, id) WHERE status = 'pending'` gave only the head of an in-order endpoint
-- (`max_in_flight: 1`), yet every task of every endpoint entered and left it. It becomes
-- `tasks_endpoint_late`, the same key over the pending tasks whose due time is not their
-- `run_at` (waiting to retry, or sent back by `retry` to be due now): for every other
-- pending task the order by (`run_at`, id) is the order by (`next_attempt_at`, id) that
-- `tasks_endpoint_due` keeps for the claims. The head is the first task of
-- `tasks_endpoint_late` or the first on-time task of `tasks_endpoint_due` before it,
-- whichever runs first (docs/dev/storage.md, "The in-order head without
-- tasks_endpoint_order"). A task delivered at its first try enters no index for it.
-- The twin, migrations/postgres/in_order_head_late.sql, changes nothing.
CREATE INDEX tasks_endpoint_late ON tasks (endpoint_id, run_at, id)
    WHERE status = 'pending' AND next_attempt_at IS NOT run_at;
DROP INDEX tasks_endpoint_order;
