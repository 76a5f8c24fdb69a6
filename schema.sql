-- webhookd schema, version 1. Applied by src/store/migrate.rs inside one transaction, which then
-- sets PRAGMA user_version = 1. Every time column holds Unix epoch milliseconds (INTEGER, UTC).
-- JSON columns hold compact JSON text exactly as it will be sent.

CREATE TABLE api_keys (
    key_id      TEXT PRIMARY KEY,
    secret      TEXT NOT NULL,
    app_id      TEXT NOT NULL,
    name        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);

CREATE TABLE retry_policies (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    app_id            TEXT NOT NULL,
    name              TEXT NOT NULL,
    max_attempts      INTEGER NOT NULL,
    backoff_type      TEXT NOT NULL,
    initial_delay_sec INTEGER NOT NULL,
    max_delay_sec     INTEGER NOT NULL,
    status            TEXT NOT NULL DEFAULT 'active',
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
);
CREATE INDEX retry_policies_app ON retry_policies (app_id, id);

CREATE TABLE endpoints (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    app_id          TEXT NOT NULL,
    name            TEXT NOT NULL,
    url             TEXT NOT NULL,
    method          TEXT NOT NULL,
    headers         TEXT NOT NULL DEFAULT '{}',
    secret          TEXT,
    timeout_ms      INTEGER NOT NULL,
    retry_policy_id INTEGER REFERENCES retry_policies (id),
    filter_events   TEXT,
    status          TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
CREATE INDEX endpoints_app ON endpoints (app_id, id);
CREATE INDEX endpoints_policy ON endpoints (retry_policy_id);

CREATE TABLE schedules (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    app_id        TEXT NOT NULL,
    name          TEXT NOT NULL,
    cron_expr     TEXT NOT NULL,
    timezone      TEXT NOT NULL,
    payload       TEXT NOT NULL DEFAULT '{}',
    endpoint_ids  TEXT NOT NULL DEFAULT '[]',
    status        TEXT NOT NULL,
    next_run_at   INTEGER,
    last_run_at   INTEGER,
    -- Set when webhookd itself paused the schedule (its last target endpoint was deleted).
    paused_reason TEXT,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL
);
CREATE INDEX schedules_app ON schedules (app_id, id);
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE status = 'active';

-- One row per (schedule, scheduled instant) that has fired: makes firing idempotent.
CREATE TABLE schedule_firings (
    schedule_id  INTEGER NOT NULL,
    scheduled_at INTEGER NOT NULL,
    PRIMARY KEY (schedule_id, scheduled_at)
) WITHOUT ROWID;

CREATE TABLE events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    app_id      TEXT NOT NULL,
    event_name  TEXT NOT NULL,
    event_key   TEXT,
    payload     TEXT NOT NULL DEFAULT '{}',
    status      TEXT NOT NULL,
    task_count  INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL
);
CREATE INDEX events_app ON events (app_id, id);
CREATE INDEX events_key ON events (app_id, event_name, event_key, created_at)
    WHERE event_key IS NOT NULL;

CREATE TABLE tasks (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    app_id            TEXT NOT NULL,
    schedule_id       INTEGER,
    event_id          INTEGER,
    endpoint_id       INTEGER NOT NULL,
    task_type         TEXT NOT NULL,
    payload           TEXT NOT NULL DEFAULT '{}',
    status            TEXT NOT NULL,
    run_at            INTEGER NOT NULL,
    attempts          INTEGER NOT NULL DEFAULT 0,
    max_attempts      INTEGER NOT NULL,
    next_attempt_at   INTEGER,
    last_status_code  INTEGER,
    last_error        TEXT,
    finished_at       INTEGER,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
);
CREATE INDEX tasks_app ON tasks (app_id, id);
CREATE INDEX tasks_app_status ON tasks (app_id, status, id);
CREATE INDEX tasks_schedule ON tasks (schedule_id, id) WHERE schedule_id IS NOT NULL;
CREATE INDEX tasks_event ON tasks (event_id, id) WHERE event_id IS NOT NULL;
CREATE INDEX tasks_endpoint ON tasks (endpoint_id, status);
-- The delivery pool's claim query: pending tasks by due time.
CREATE INDEX tasks_due ON tasks (next_attempt_at) WHERE status = 'pending';
CREATE INDEX tasks_finished ON tasks (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE attempts (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id       INTEGER NOT NULL,
    attempt       INTEGER NOT NULL,
    started_at    INTEGER NOT NULL,
    duration_ms   INTEGER NOT NULL,
    status_code   INTEGER,
    error         TEXT,
    response_body TEXT
);
CREATE INDEX attempts_task ON attempts (task_id, attempt);
