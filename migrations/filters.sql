-- Content filters and retry limits (docs/design.md §18).
-- An endpoint's filter_payload: a JSON object of conditions on an event's payload, as text.
ALTER TABLE endpoints ADD COLUMN filter_payload TEXT;
-- A retry policy's age limit (seconds since the first attempt began; NULL: none) and jitter.
ALTER TABLE retry_policies ADD COLUMN max_age_sec INTEGER;
ALTER TABLE retry_policies ADD COLUMN jitter TEXT NOT NULL DEFAULT 'none';
