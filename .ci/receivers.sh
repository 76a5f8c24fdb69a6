#!/usr/bin/env bash
# CI: the interpreters of the example receivers and clients (examples/receivers,
# examples/clients), which tests/it/receivers.rs runs against a live server: Python 3 and Node
# are expected on the machine; Go comes from Debian. Idempotent and quiet when all are there.
set -euo pipefail
missing=()
command -v python3 >/dev/null || missing+=(python3)
command -v node >/dev/null || missing+=(nodejs)
command -v go >/dev/null || missing+=(golang-go)
if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing ${missing[*]} (Debian) for the example receivers"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
