#!/usr/bin/env bash
# slurm24-root.sh - a Debian 13 (trixie) root with Slurm 24.11 from Debian, for building
# and testing the plugins against the version sites run (issue 7); print its path.
#
# Debian 13's Slurm needs glibc 2.38 and cannot be installed on the Debian 12 host
# (TESTBED-NOTES, "Slurm 24.11"). Cached outside the clone in
# ${CLAVIS_CACHE:-/var/cache/clavis}/trixie-slurm-1: a minbase debootstrap (~25 s), the
# Slurm packages, a compiler, and the configured slurm-wlm source of the installed
# version in /usr/src/slurm-src (apt-get source with a trixie deb-src entry; the upstream
# tarball, without Debian's patches). No service starts in it (policy-rc.d exits 101).
# Idempotent: an existing root is only printed.
set -euo pipefail

die() {
    echo "slurm24-root: $*" >&2
    exit 1
}

cache=${CLAVIS_CACHE:-/var/cache/clavis}
# one builder at a time (two test sessions may start together); others wait, then reuse
if [[ -z ${CLAVIS_S24_LOCKED:-} && -w /run/lock ]]; then
    export CLAVIS_S24_LOCKED=1
    exec flock -w 1800 /run/lock/clavis-slurm24.lock "$0" "$@"
fi
root=$cache/trixie-slurm-1
if [[ -f $root/.clavis-root ]]; then
    echo "$root"
    exit 0
fi
[[ $(id -u) -eq 0 ]] || die "must run as root"
command -v debootstrap >/dev/null || die "debootstrap missing (make testbed-install)"
mirror=$(
    {
        grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
        grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}'
    } | grep -v -e security -e '^$' | grep '/debian/\?$' | head -n1
) || true
[[ -n $mirror ]] || die "no Debian mirror found in the apt sources"
mirror=${mirror%/}

mkdir -p "$cache"
mounted=()
work=""
unmount_all() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" 2>/dev/null || true
    done
    mounted=()
}
cleanup() {
    unmount_all
    if [[ -n $work ]]; then rm -rf --one-file-system "$work"; fi
}
trap cleanup EXIT
mount_in() { # ROOT: /proc, /sys, /dev for package scripts
    local d
    for d in proc sys dev; do
        mount --bind "/$d" "$1/$d"
        mounted+=("$1/$d")
    done
}
in_root() { # ROOT CMD...
    local r=$1
    shift
    chroot "$r" env DEBIAN_FRONTEND=noninteractive LC_ALL=C "$@"
}

# what the root needs: Slurm 24.11 from Debian, and what building against it takes
# (configure of 24.11 insists on munge's headers)
packages=(slurmctld slurmd slurm-client munge libslurm-dev libmunge-dev
    gcc make libc6-dev dpkg-dev pkg-config xz-utils ca-certificates)

# Stage 1, the root (kept even if stage 2 fails, so a retry is quick)
if [[ ! -f $root/.clavis-packages ]]; then
    work=$(mktemp -d "$cache/trixie-slurm-build.XXXXXX")
    chmod 755 "$work" # it becomes "/": package scripts run as other users (munge) in it
    timeout 900 debootstrap --variant=minbase trixie "$work" "$mirror" \
        >"$cache/trixie-slurm-debootstrap.log" 2>&1 ||
        die "debootstrap failed; see $cache/trixie-slurm-debootstrap.log"
    printf '#!/bin/sh\nexit 101\n' >"$work/usr/sbin/policy-rc.d"
    chmod 755 "$work/usr/sbin/policy-rc.d"
    {
        echo "deb $mirror trixie main"
        echo "deb-src $mirror trixie main"
    } >"$work/etc/apt/sources.list"
    mount_in "$work"
    in_root "$work" timeout 300 apt-get update -qq
    unmount_all
    touch "$work/.clavis-packages"
    rm -rf "$root"
    mv "$work" "$root"
    work=""
fi

# Stage 1b, its packages (again when the list above changed)
mount_in "$root"
if [[ $(cat "$root/.clavis-packages") != "${packages[*]}" ]]; then
    in_root "$root" timeout 1200 apt-get install -y -qq --no-install-recommends \
        "${packages[@]}" >/dev/null
    echo "${packages[*]}" >"$root/.clavis-packages"
fi

# Stage 2, the configured source of the installed Slurm in /usr/src/slurm-src. Only the
# upstream .orig tarball is needed: the .dsc/.debian.tar.xz of a point release may 404
# on the mirror (as for CRIU, TESTBED-NOTES), which apt-get reports and we tolerate.
debver=$(in_root "$root" dpkg-query -W -f='${Version}' slurmctld)
upstream=${debver%-*}
rm -rf "$root/usr/src/fetch" "$root/usr/src/slurm-src"
mkdir -p "$root/usr/src/fetch"
in_root "$root" sh -c "cd /usr/src/fetch && apt-get source --download-only -qq slurm-wlm=$debver" \
    >"$root/usr/src/source.log" 2>&1 || true
orig=$(find "$root/usr/src/fetch" -maxdepth 1 -name "slurm-wlm_${upstream}.orig.tar.*" | head -n1)
[[ -n $orig ]] || die "slurm-wlm_${upstream}.orig.tar.* did not arrive: $(tail -n 5 "$root/usr/src/source.log")"
mkdir -p "$root/usr/src/slurm-src"
tar -xf "$orig" -C "$root/usr/src/slurm-src" --strip-components=1
in_root "$root" sh -c "cd /usr/src/slurm-src && ./configure --prefix=/usr \
    --libdir=/usr/lib/x86_64-linux-gnu --sysconfdir=/etc/slurm --without-rpath \
    --disable-debug --enable-multiple-slurmd" >"$root/usr/src/configure.log" 2>&1 ||
    die "configure failed: $(tail -n 20 "$root/usr/src/configure.log")"
rm -rf "$root/usr/src/fetch"
echo "$debver" >"$root/.clavis-root"
echo "$root"
