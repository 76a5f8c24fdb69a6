-- The replay cache (docs/design.md §2) on disk, so that a restart (graceful or kill -9) never
-- reopens the window for a signature already accepted. One row per accepted (key id,
-- signature) until its timestamp leaves the skew window; expired rows are pruned by the
-- server's maintenance thread.
CREATE TABLE replay_guard (
    key_id     TEXT    NOT NULL,
    signature  TEXT    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (key_id, signature)
) WITHOUT ROWID;
CREATE INDEX replay_guard_expiry ON replay_guard (expires_at);
