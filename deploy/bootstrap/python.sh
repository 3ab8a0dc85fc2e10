#!/usr/bin/env bash
# python.sh - make sure a Python 3.11 with venv support exists (fresh Debian 12 as root).
# Idempotent: installs Debian packages only when something is missing.
set -euo pipefail

need=()
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
command -v make >/dev/null 2>&1 || need+=(make)

if ((${#need[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "bootstrap: missing ${need[*]}; run as root or install them" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
fi

ver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [[ $ver != 3.11 ]]; then
    echo "bootstrap: Python 3.11 required, found $ver" >&2
    exit 1
fi
