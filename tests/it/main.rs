//! The integration tests: one binary, each module a family of behaviour checked through a real
//! server on 127.0.0.1:0, a real database and a real HTTP receiver on loopback. The database is
//! a SQLite file, or with `WEBHOOKD_TEST_DB=postgres` a database on a private PostgreSQL server
//! (`support::test_db`).

mod api_auth;
mod api_docs;
mod api_endpoints;
mod api_policies;
mod backup;
mod bulk_retry;
mod catchup;
mod cli;
mod conformance;
mod dashboard;
mod delivery;
mod delivery_controls;
mod durability;
mod events;
mod filters;
mod fuzz;
mod health;
mod ids;
mod isolation;
mod keys_api;
mod logs;
mod migrate;
mod multinode;
mod openapi;
mod operations;
mod packaging;
mod pg;
mod pg_delivery;
mod pg_listen;
mod pg_store;
mod pg_tables;
mod pg_tls;
mod receivers;
mod reliability;
mod schedules;
mod shutdown;
mod stranger;
mod support;
mod tasks;
mod traces;
mod unknown_fields;
mod visibility;
mod windows;
