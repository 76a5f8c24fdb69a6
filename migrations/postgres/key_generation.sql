-- Twin of migrations/key_generation.sql: the generation of the API keys, bumped with every key
-- created or revoked by any node or `webhookd keys`, read by each request in its own
-- transaction to learn whether the keys held in memory are still current.
CREATE TABLE key_generation (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    generation BIGINT NOT NULL
);
-- No row until the first key change: a missing row is generation 0 (so `webhookd migrate` copies
-- it like any other table into an empty database).
