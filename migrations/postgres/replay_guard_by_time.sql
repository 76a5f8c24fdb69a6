-- Twin of migrations/replay_guard_by_time.sql: the replay records keyed by the signed time
-- first, (sent_at, key id, signature), so that inserts land on the newest leaf of the primary
-- key and the pruning deletes from its oldest end; no separate expiry index. Rows recorded
-- before this step take the expiry less the default skew window (300 s) as their signed time.
ALTER TABLE replay_guard ADD COLUMN sent_at BIGINT;
UPDATE replay_guard SET sent_at = expires_at - 300000;
ALTER TABLE replay_guard ALTER COLUMN sent_at SET NOT NULL;
ALTER TABLE replay_guard DROP CONSTRAINT replay_guard_pkey;
ALTER TABLE replay_guard ADD PRIMARY KEY (sent_at, key_id, signature);
DROP INDEX replay_guard_expiry;
