-- The target generation of each app: a number that changes in the same transaction as every
-- write that changes which of the app's endpoints get an event's tasks, or with which filters
-- or attempts (an endpoint created, changed, enabled, disabled by hand or by the delivery pool,
-- deleted; a retry policy it uses changed), whoever writes it: any node or the CLI. A server
-- holds each app's enabled endpoints in memory and reads them again only when the number moved
-- (docs/dev/storage.md, "Targets in memory"). Twin of migrations/postgres/target_generation.sql.
CREATE TABLE target_generation (
    app_id TEXT PRIMARY KEY,
    generation INTEGER NOT NULL
);
-- No row until the app's first such write: a missing row is generation 0. Rows are never
-- deleted (a value must never come back for its app).
