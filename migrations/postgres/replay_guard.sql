-- PostgreSQL twin of migrations/replay_guard.sql: accepted (key id, signature) pairs until
-- their timestamp leaves the skew window, shared by every node on the database.
CREATE TABLE replay_guard (
    key_id     TEXT   NOT NULL,
    signature  TEXT   NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (key_id, signature)
);
CREATE INDEX replay_guard_expiry ON replay_guard (expires_at);
