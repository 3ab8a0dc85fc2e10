#!/usr/bin/env bash
# monitor.sh - what clavis-monitor runs on a compute host (Debian 12, as root): nftables
# for traffic accounting, ipmitool for power. Idempotent: apt-get only when missing.
set -euo pipefail

need=()
command -v nft >/dev/null 2>&1 || need+=(nftables)
command -v ipmitool >/dev/null 2>&1 || need+=(ipmitool)

if ((${#need[@]})); then
    if [[ $(id -u) -ne 0 ]]; then
        echo "monitor bootstrap: missing ${need[*]}; run as root or install them" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
fi
