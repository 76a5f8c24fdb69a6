-- The replay guard's expiry index as a BRIN index (docs/dev/storage.md, "The replay guard's
-- expiry index on PostgreSQL"). Every signed request inserts a pair whose `expires_at` is the
-- newest yet, so a B-tree on it took every insert on its right-most leaf, one backend at a
-- time: the signed GETs of all nodes queued on that page's lock. A BRIN index keeps one
-- summary per range of heap pages and leaves the range being filled unsummarized, so an
-- insert does not touch it; the prune (`expires_at < now`) still finds the old ranges by it.
DROP INDEX replay_guard_expiry;
CREATE INDEX replay_guard_expiry ON replay_guard USING brin (expires_at);
