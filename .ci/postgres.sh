#!/usr/bin/env bash
# CI: Debian's PostgreSQL server binaries for the PostgreSQL tests (docs/design.md §16; the suite's
# second pass on PostgreSQL is .ci/suite-postgres.sh, run after every other install). Only the
# package is installed; no
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
