-- The replay records keyed by the signed time first: (sent_at, key id, signature). A signature
-- covers its timestamp, so the triple is as unique as the pair was, and the replay check knows
-- the timestamp from the request's header, so it still finds a replay with one key lookup.
-- What changes is where rows go: a new record lands on the table's newest leaf page and the
-- pruning deletes from its oldest end, instead of both touching a random leaf per row (a WAL
-- page per signed request, and a pruning transaction that dirtied a page per deleted row).
-- `expires_at` stays (when the pair may be taken over again), no separate expiry index is
-- needed: rows expire in about the order they were signed (docs/dev/storage.md, "Replay
-- records keyed by time"). Twin of migrations/postgres/replay_guard_by_time.sql.
CREATE TABLE replay_guard_by_time (
    sent_at    INTEGER NOT NULL,
    key_id     TEXT    NOT NULL,
    signature  TEXT    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (sent_at, key_id, signature)
) WITHOUT ROWID;
-- Rows recorded before this step kept only their expiry; their signed time is taken as the
-- expiry less the default skew window (300 s), which is exact for a server on the default
-- --max-skew-secs. With another window, a request signed before the upgrade could be accepted
-- once more during the first window after it.
INSERT INTO replay_guard_by_time (sent_at, key_id, signature, expires_at)
    SELECT expires_at - 300000, key_id, signature, expires_at FROM replay_guard;
DROP TABLE replay_guard;
ALTER TABLE replay_guard_by_time RENAME TO replay_guard;
