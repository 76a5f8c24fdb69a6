-- One row the health check writes (GET /healthz, docs/design.md §10): a write probe that proves the
-- database file can still be written, not just read.
CREATE TABLE IF NOT EXISTS health_probe (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    checked_at INTEGER NOT NULL
);
