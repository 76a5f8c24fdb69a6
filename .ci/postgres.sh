#!/usr/bin/env bash
# CI: Debian's PostgreSQL server binaries for the tests/it/pg_store tests (contract §16), then the
# whole integration suite a second time on PostgreSQL (WEBHOOKD_TEST_DB=postgres, with CI=true so
# that a missing server is a failure, not a skip). Only the package is installed; no
# cluster is started system-wide: the tests start private servers with initdb/pg_ctl on temp
# folders (tests/it/pg.rs), as the `postgres` user when root.
set -euo pipefail
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    echo "== installing postgresql (Debian)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # policy-rc.d 101: the package's post-install must not start the system-wide cluster.
    policy=/usr/sbin/policy-rc.d
    had_policy=0
    if [ -e "$policy" ]; then had_policy=1; else printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"; fi
    apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    if [ "$had_policy" = 0 ]; then rm -f "$policy"; fi
fi
ls -d /usr/lib/postgresql/*/bin
id postgres >/dev/null
echo "== WEBHOOKD_TEST_DB=postgres cargo test --test it"
started=$(date +%s)
CI=true WEBHOOKD_TEST_DB=postgres cargo test --test it
echo "== the suite on PostgreSQL took $(( $(date +%s) - started )) s"
