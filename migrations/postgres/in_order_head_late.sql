-- The twin of migrations/in_order_head_late.sql, kept as a step so that both schemas keep one
-- version number, and left without a change: PostgreSQL keeps `tasks_endpoint_order`. SQLite
-- replaced it to write one pending-only index fewer per task (WAL pages per event, the target
-- of issue 24); PostgreSQL's claims and the in-order head are planned around its partial
-- indexes' predicates (steps `claim_index_predicate`, `pending_counted`) and its costs per
-- delivery are already under their target, so it keeps the plan it was measured with.
SELECT 1;
