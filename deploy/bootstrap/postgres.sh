#!/usr/bin/env bash
# postgres.sh - PostgreSQL server binaries from Debian, for the store tests that run
# clavisd against PostgreSQL (idempotent; root installs, anyone else only checks).
#
# No service is started: on a machine without systemd the package's maintainer script
# would try to start its "main" cluster, so a policy-rc.d that exits 101 is put in place
# for the install when none exists (and only ours is removed). The tests start their own
# private cluster (initdb/pg_ctl in a temporary directory, unix socket only) and stop it.
set -euo pipefail

have() { compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }

if have; then
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "postgres bootstrap: PostgreSQL is missing; run as root or install postgresql" >&2
    exit 1
fi

policy=/usr/sbin/policy-rc.d
ours=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# clavis postgres bootstrap: no service starts during apt-get\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    ours=1
fi
cleanup() {
    if ((ours)); then rm -f "$policy"; fi
}
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
echo "postgres bootstrap: installing postgresql"
timeout 300 apt-get update -qq
timeout 600 apt-get install -y -qq --no-install-recommends postgresql >/dev/null
have || { echo "postgres bootstrap: initdb not found after install" >&2; exit 1; }
echo "postgres bootstrap: done"
