#!/usr/bin/env bash
# CI: the whole integration suite a second time, on PostgreSQL (WEBHOOKD_TEST_DB=postgres, with
# CI=true so that a missing server is a failure, not a skip). Runs last in .ci/run, after every
# component the suite needs (PostgreSQL, Chromium and playwright, schemathesis) is installed.
set -euo pipefail
echo "== WEBHOOKD_TEST_DB=postgres cargo test --test it"
started=$(date +%s)
# The tests that start their own private servers whatever WEBHOOKD_TEST_DB says (the store's
# own tests, migrate, the multi-node tests) run in .ci/run's `cargo test` pass: not twice. The
# tests named `…_on_sqlite` check what only SQLite has (its file, its WAL, backups): left out
# here rather than reported `ok` without checking anything (tests/it/support.rs, sqlite_only).
CI=true WEBHOOKD_TEST_DB=postgres cargo test --test it -- \
    --skip pg_store:: --skip pg_tables:: --skip pg_delivery:: --skip pg_listen:: \
    --skip migrate:: --skip multinode:: --skip _on_sqlite
echo "== the suite on PostgreSQL took $(( $(date +%s) - started )) s"
