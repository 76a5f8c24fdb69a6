-- Autovacuum for the queue tables by how much they churn, not by how large they are
-- (PostgreSQL only: a tuning step, counted in webhookd_schema.tuning, not a schema version).
--
-- A claimed or finished task leaves a dead version in every index of `tasks`, the pending-only
-- ones included, and the delivery round's walk and claims step over those entries until VACUUM
-- removes them. At PostgreSQL's defaults a table is vacuumed once 20% of it is dead: on a
-- `tasks` table that keeps weeks of finished tasks that is hundreds of thousands of dead
-- entries. Here: vacuumed at each autovacuum visit (every `autovacuum_naptime`, a minute by
-- default) once 1,000 versions died or were inserted since the last one, unthrottled, and
-- analyzed after 2% changed, so the planner's picture of the pending tasks stays current. No
-- fillfactor: every update of a task changes an indexed column (`status`, `finished_at`,
-- `lease_until`), so none can be a HOT update and free space on the page would not help.
-- `replay_guard` (one insert per signed request, deleted as it expires) gets the same
-- thresholds. Setting these needs only ownership of the tables; an operator may change them
-- later (ALTER TABLE ... SET / RESET), and webhookd does not set them again.
ALTER TABLE tasks SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
ALTER TABLE replay_guard SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);
