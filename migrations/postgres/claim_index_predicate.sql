-- PostgreSQL only: `tasks_endpoint_due`'s predicate written under `COLLATE "C"`, as the claims
-- and the walk write their pending test, so that of the pending-only indexes only this one
-- matches them. Its twin `tasks_endpoint_order (endpoint_id, run_at, id) WHERE status =
-- 'pending'` matched the claims' `status = 'pending' AND endpoint_id = …` as well, and a
-- generic plan could read an endpoint's whole backlog through it, filter `next_attempt_at` and
-- sort (BENCHMARKS.md, pgdue; docs/dev/storage.md, "Claims whatever the statistics").
-- `(status COLLATE "C") = 'pending'` holds for exactly the rows `status = 'pending'` holds for
-- (equal text is equal under every deterministic collation), so the index holds the same
-- entries, and PostgreSQL proves its predicate only from a test written the same way. The
-- in-order claim keeps `status = 'pending'` and `tasks_endpoint_order`. Same name and columns:
-- the shape stays SQLite's, whose twin (migrations/claim_index_predicate.sql) changes nothing.
-- Rebuilt in the step's transaction: writes to `tasks` wait for it (docs/operations.md).
DROP INDEX tasks_endpoint_due;
CREATE INDEX tasks_endpoint_due ON tasks (endpoint_id, next_attempt_at, id)
    WHERE (status COLLATE "C") = 'pending';
