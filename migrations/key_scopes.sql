-- Keys with scopes (docs/design.md §17): what a key may do, when it stops working, and when it
-- was last used (written at most once a minute per key). Keys made before this step keep doing
-- everything in their app: `admin`. Twin of migrations/postgres/key_scopes.sql.
ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT 'admin';
ALTER TABLE api_keys ADD COLUMN expires_at INTEGER;
ALTER TABLE api_keys ADD COLUMN last_used_at INTEGER;
-- A key's app lists its keys: `GET /v1/keys`.
CREATE INDEX api_keys_app ON api_keys (app_id, created_at);
