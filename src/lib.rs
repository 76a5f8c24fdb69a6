//! webhookd: a self-hosted scheduled webhook service over one embedded SQLite file.
//!
//! # Layout
//! - `cli`, `config`: the command line and the validated server configuration.
//! - `server`: the hyper 1 accept loop (`wire`: hyper's protocol-error replies in the
//!   envelope; `request_id`: the id of every reply; `connections`: the connection caps);
//!   `api`: the router and one file per resource;
//!   `auth`: inbound request signatures; `error`: the one API error type and the envelope.
//! - `store`: the `Store` / `Tx` traits every caller uses (`Arc<dyn Store>`), `StoreError`, and
//!   the record types, one file per table. `store::sqlite`: every SQLite statement, one file
//!   per table, over an r2d2 pool (`SqliteStore`). `store::postgres`: the PostgreSQL pool and
//!   versioned schema (docs/design.md §16). Nothing outside `store` names a database driver.
//! - `cron`: cron parsing and next-fire computation in a time zone (pure); `suggest`: the
//!   did-you-mean of mistyped fields, query parameters and time zones.
//! - `scheduler`: fires due schedules into tasks; `delivery`: the blocking worker pool that
//!   sends tasks; `retry`, `signing`, `filter`: pure helpers of the delivery path;
//!   `payload_filter`: endpoint conditions on an event's payload (pure).
//! - `fanout`: which endpoints get a task for an event or a firing; `targets`: each app's enabled
//!   endpoints held in memory for publishes, checked against the store's target generation.
//! - `metrics`: the counters behind `GET /metrics`; `health`: whether the database can still be
//!   written (`GET /healthz`, 503s to writes, the start-up check); `operator`: the events
//!   webhookd publishes when it disables an endpoint, fails a task or pauses a schedule itself.
//! - `ui`: the dashboard's files under `/ui/`.
//! - `trace`: W3C `traceparent` parsing and ids (pure), for the trace every delivery carries;
//!   `otlp`: the bounded, non-blocking OTLP/HTTP span exporter behind `--otlp-endpoint`;
//!   `spans`: the spans webhookd exports (requests, firings, queue waits, attempts).
//! - `clock`: the time source, movable in tests; `app`: the state a running server shares;
//!   `background`: starts and stops the scheduler and the delivery pool together.
//! - `backup`: scheduled backups of a SQLite database in `serve` (`--backup-dir`).
//! - `build_info`: version, commit and target of this binary (from `build.rs`).
//! - `client`: the signing API client behind `webhookd api`, the tests and the benchmark;
//!   `receive`: the verifying receiver behind `webhookd receive`.

pub mod api;
pub mod app;
pub mod auth;
pub mod background;
pub mod backup;
pub mod build_info;
pub mod cli;
pub mod client;
pub mod clock;
pub mod config;
pub mod connections;
pub mod cron;
pub mod delivery;
pub mod error;
pub mod fanout;
pub mod filter;
pub mod health;
pub mod metrics;
pub mod operator;
pub mod otlp;
pub mod payload_filter;
pub mod ratelimit;
pub mod receive;
pub mod replay_behind;
pub mod request_id;
pub mod retry;
pub mod scheduler;
pub mod server;
pub mod signing;
pub mod spans;
pub mod store;
pub mod suggest;
pub mod targets;
pub mod trace;
pub mod ui;
pub mod wire;
