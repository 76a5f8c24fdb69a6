-- Twin of migrations/key_scopes.sql (docs/design.md §17): a key's scope (`admin` for the keys
-- made before), when it expires, and when it was last used (at most once a minute per key).
ALTER TABLE api_keys ADD COLUMN scope TEXT NOT NULL DEFAULT 'admin';
ALTER TABLE api_keys ADD COLUMN expires_at BIGINT;
ALTER TABLE api_keys ADD COLUMN last_used_at BIGINT;
-- A key's app lists its keys: `GET /v1/keys`.
CREATE INDEX api_keys_app ON api_keys (app_id, created_at);
