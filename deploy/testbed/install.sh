#!/usr/bin/env bash
# install.sh - Debian 12 packages the testbed needs (idempotent; root only).
#
# Package maintainer scripts would start slurmctld, slurmd, munge and lxc-net on a
# machine without systemd; a policy-rc.d that exits 101 stops them (TESTBED-NOTES,
# "No systemd"). We only add such a file when none exists, and remove only our own.
set -euo pipefail

packages=(
    # Slurm 22.05 and its authentication
    slurmctld slurmd slurm-client munge
    # accounting: slurmdbd with a MariaDB of its own in the head's netns (sacct)
    slurmdbd mariadb-server
    # spank.h for slurm-plugin/ (spank_clavis.so); debootstrap for its Slurm 24.11 root
    libslurm-dev debootstrap
    # system containers
    lxc
    # BMC simulator, its client, and the headers for our DCMI loadlib module
    openipmi ipmitool libopenipmi-dev
    # MPI inside the containers (the host's /usr is bind-mounted into them)
    mpich libmpich-dev
    # network plumbing
    iproute2 iptables procps psmisc
    # building CRIU 4.2.1 from source (TESTBED-NOTES, "CRIU")
    build-essential dpkg-dev xz-utils pkg-config
    libbsd-dev libcap-dev libnet1-dev libnl-3-dev libnl-route-3-dev libprotobuf-c-dev
    libprotobuf-dev protobuf-c-compiler protobuf-compiler python3-protobuf
    libgnutls28-dev uuid-dev libaio-dev
)

if [[ $(id -u) -ne 0 ]]; then
    echo "testbed install: must run as root" >&2
    exit 1
fi

missing=()
for p in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ $status == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
    exit 0
fi

policy=/usr/sbin/policy-rc.d
ours=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\n# clavis-testbed: no service starts during apt-get\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    ours=1
fi
cleanup() {
    if ((ours)); then rm -f "$policy"; fi
}
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
echo "testbed install: ${#missing[@]} packages missing: ${missing[*]}"
# A fresh machine may have no or stale package lists; update once, bounded in time.
timeout 300 apt-get update -qq
timeout 1200 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "testbed install: done"
