#!/usr/bin/env bash
# ui.sh - what vismon-ui's build and tests need (idempotent; root installs, anyone else
# only checks): Debian's chromium for the end-to-end test (Playwright drives it through
# playwright-core; no browser is downloaded), and the npm packages of package-lock.json.
#
# npm ci wipes and rebuilds node_modules from the lock file; its download cache lives
# outside the clone, in ${CLAVIS_CACHE:-/var/cache/clavis}/npm, so a fresh clone (CI)
# installs offline from it after the first run. A stamp inside node_modules records the
# lock file it was built from, so an unchanged lock costs nothing.
set -euo pipefail
cd "$(dirname "$0")/../../vismon-ui"

if [[ ! -x /usr/bin/chromium ]]; then
    if [[ $(id -u) -ne 0 ]]; then
        echo "ui bootstrap: chromium is missing; run as root or apt-get install chromium" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    echo "ui bootstrap: installing chromium"
    timeout 300 apt-get update -qq
    timeout 900 apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
command -v npm >/dev/null || { echo "ui bootstrap: npm (Node.js 20) is missing" >&2; exit 1; }

cache=${CLAVIS_CACHE:-/var/cache/clavis}/npm
mkdir -p "$cache"
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [[ "$(cat node_modules/.clavis-lock 2>/dev/null)" != "$want" ]]; then
    echo "ui bootstrap: npm ci (cache $cache)"
    timeout 900 npm ci --cache "$cache" --prefer-offline --no-audit --no-fund --loglevel=error
    echo "$want" >node_modules/.clavis-lock
fi
