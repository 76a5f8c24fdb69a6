-- The generation of the API keys: one row, bumped in the same transaction as every key created
-- or revoked (by any node or by `webhookd keys`), so a server may hold its keys in memory and
-- reload them only when the number moved (docs/dev/storage.md, "Keys in memory"). Twin of
-- migrations/postgres/key_generation.sql.
CREATE TABLE key_generation (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL
);
-- No row until the first key change: a missing row is generation 0 (so `webhookd migrate` copies
-- it like any other table into an empty database).
