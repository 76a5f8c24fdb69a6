-- The request headers of each attempt (docs/API.md, "Attempt"): compact JSON text of
-- [name, value] pairs as sent, credentials redacted; NULL for attempts made before.
ALTER TABLE attempts ADD COLUMN request_headers TEXT;
