#!/usr/bin/env bash
# build24.sh - build both plugins against Slurm 24.11 inside the Debian 13 root of
# slurm24-root.sh, with the same Makefile and flags; print the output directory
# (ROOT/clavis-build, also /clavis-build inside the root).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=$("$here/compat/slurm24-root.sh")
# one build in the root at a time (its bind mounts and /clavis-build are shared)
if [[ -z ${CLAVIS_B24_LOCKED:-} ]]; then
    export CLAVIS_B24_LOCKED=1
    exec flock -w 1800 /run/lock/clavis-build24.lock "$0" "$@"
fi
mounted=()
cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" 2>/dev/null || true
    done
}
trap cleanup EXIT
mkdir -p "$root/clavis/slurm-plugin" "$root/clavis-build"
# the sources, read-only: the build writes only to /clavis-build
mount --bind "$here" "$root/clavis/slurm-plugin"
mounted+=("$root/clavis/slurm-plugin")
mount -o remount,bind,ro "$root/clavis/slurm-plugin"
chroot "$root" env LC_ALL=C SLURM_SRC=/usr/src/slurm-src \
    make -C /clavis/slurm-plugin BUILD=/clavis-build >&2
echo "$root/clavis-build"
