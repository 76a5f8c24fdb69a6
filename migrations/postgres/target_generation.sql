-- Twin of migrations/target_generation.sql: the target generation of each app, changed with
-- every write that changes the app's enabled endpoints, their filters or attempts, by any node
-- or the CLI; read by each publish in its own transaction to learn whether the endpoints held
-- in memory are still current.
CREATE TABLE target_generation (
    app_id TEXT PRIMARY KEY,
    generation BIGINT NOT NULL
);
-- No row until the app's first such write: a missing row is generation 0. Rows are never
-- deleted (a value must never come back for its app).
