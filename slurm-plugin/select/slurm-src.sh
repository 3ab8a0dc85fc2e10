#!/usr/bin/env bash
# slurm-src.sh - print the path of a configured Slurm source tree of exactly the
# installed slurmctld's version (select_clavis.so is built against its internal
# headers and config.h). Cached outside the clone, in
# ${CLAVIS_CACHE:-/var/cache/clavis}/slurm-src-<Debian version>; fetched once with
# `apt-get source slurm-wlm=<version>` through a private apt configuration (deb-src of
# the machine's own release, -updates and -security), so the machine's sources are never
# changed; then `./configure` for config.h (~20 s).
#
# SLURM_SRC=DIR uses an already configured tree instead (another Slurm version, see
# README.md); it is refused, like a cache of the wrong version, when its version is not
# the installed slurmctld's.
set -euo pipefail

die() {
    echo "slurm-src: $*" >&2
    exit 1
}

installed_upstream() {
    slurmctld -V 2>/dev/null | awk '{print $2}'
}

tree_version() { # the version config.h of a configured tree says
    sed -n 's/^#define SLURM_VERSION_STRING "\(.*\)"$/\1/p' "$1/config.h" 2>/dev/null
}

check_tree() { # DIR: configured and of the installed version, or die
    local dir=$1 want have
    want=$(installed_upstream)
    [[ -n $want ]] || die "slurmctld is not installed (make testbed-install)"
    [[ -f $dir/config.h && -f $dir/src/common/plugin.h ]] ||
        die "$dir is not a configured Slurm source tree (no config.h or src/common/plugin.h)"
    have=$(tree_version "$dir")
    [[ $have == "$want" ]] ||
        die "$dir is Slurm $have but the installed slurmctld is $want: a select plugin must be built from the same version; remove it or point SLURM_SRC at a $want tree"
}

if [[ -n ${SLURM_SRC:-} ]]; then
    check_tree "$SLURM_SRC"
    echo "$SLURM_SRC"
    exit 0
fi

debver=$(dpkg-query -W -f='${Version}' slurmctld 2>/dev/null) ||
    die "slurmctld is not installed (make testbed-install)"
cache=${CLAVIS_CACHE:-/var/cache/clavis}
# one builder at a time (two test sessions may start together); others wait, then reuse
if [[ -z ${CLAVIS_SRC_LOCKED:-} && -w /run/lock ]]; then
    export CLAVIS_SRC_LOCKED=1
    exec flock -w 1800 /run/lock/clavis-slurm-src.lock "$0" "$@"
fi
dest=$cache/slurm-src-$debver
if [[ -f $dest/.clavis-slurm-src ]]; then
    check_tree "$dest"
    echo "$dest"
    exit 0
fi
[[ $(id -u) -eq 0 ]] || die "must run as root to fetch the source into $cache"
# shellcheck disable=SC1091
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[[ -n $codename ]] || die "no VERSION_CODENAME in /etc/os-release"

mkdir -p "$cache"
work=$(mktemp -d "$cache/slurm-src-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
apt_dir=$work/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/sources.list.d"
mirror=$(
    {
        grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
        grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}'
    } | grep -v -e security -e '^$' | grep '/debian/\?$' | head -n1
) || true
[[ -n $mirror ]] || die "no Debian mirror found in the apt sources"
{
    echo "deb-src ${mirror%/} $codename main"
    echo "deb-src ${mirror%/} $codename-updates main"
    echo "deb-src http://security.debian.org/debian-security $codename-security main"
} >"$apt_dir/sources.list"
apt_opts=(
    -o "Dir::Etc::SourceList=$apt_dir/sources.list"
    -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache=$apt_dir/cache"
    -o "APT::Sandbox::User=root"
)
timeout 300 apt-get "${apt_opts[@]}" update -qq
(cd "$work" && timeout 300 apt-get "${apt_opts[@]}" source -qq "slurm-wlm=$debver") \
    >"$work/source.log" 2>&1 || {
    cat "$work/source.log" >&2
    die "apt-get source slurm-wlm=$debver failed (is that version still on the mirror?)"
}
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'slurm-wlm-*' | head -n1)
[[ -n $src ]] || die "apt-get source gave no slurm-wlm-* directory"
# the configure line of TESTBED-NOTES ("Slurm 22.05"), as Debian builds it
(cd "$src" && timeout 600 ./configure --prefix=/usr --libdir=/usr/lib/x86_64-linux-gnu \
    --sysconfdir=/etc/slurm --without-rpath --disable-debug --enable-multiple-slurmd) \
    >"$work/configure.log" 2>&1 || {
    tail -n 30 "$work/configure.log" >&2
    die "configure failed"
}
echo "$debver" >"$src/.clavis-slurm-src"
rm -rf "$dest"
mv "$src" "$dest"
check_tree "$dest"
echo "$dest"
