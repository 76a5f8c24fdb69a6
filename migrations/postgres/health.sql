-- Twin of migrations/health.sql: the row the health check writes (GET /healthz, docs/design.md §10),
-- a write probe that proves the database can still be written, not just read.
CREATE TABLE health_probe (
    id         BIGINT PRIMARY KEY CHECK (id = 1),
    checked_at BIGINT NOT NULL
);
