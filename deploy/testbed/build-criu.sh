#!/usr/bin/env bash
# build-criu.sh - build CRIU 4.2.1 once into a cache outside the clone; print its path.
#
# Debian 12's criu 3.17 fails on this kernel and Debian 13's 4.1.1 fails on TCP; 4.2.1
# from sid's source package works (TESTBED-NOTES, "CRIU"). Only the .orig tarball is
# needed: the .debian.tar.xz may 404, which `apt-get source` reports but we tolerate.
set -euo pipefail

version=4.2.1
cache=${CLAVIS_CACHE:-/var/cache/clavis}
dest=$cache/criu-$version
bin=$dest/criu

if [[ -x $bin ]] && "$bin" --version 2>/dev/null | grep -q "Version: $version"; then
    echo "$bin"
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "build-criu: must run as root" >&2
    exit 1
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/criu-build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# A private apt configuration that only knows sid's sources, so the machine's own
# sources.list is never changed and no sid binary package can be installed by mistake.
apt_dir=$work/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/sources.list.d"
# The machine's own Debian mirror (from its apt sources; not the security archive).
mirror=$(
    {
        grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
        grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}'
    } | grep -v -e security -e '^$' | grep '/debian/\?$' | head -n1
) || true # a missing sources file (grep exit 2) must not stop us; emptiness is checked
if [[ -z $mirror ]]; then
    echo "build-criu: no Debian mirror found in the apt sources" >&2
    exit 1
fi
echo "deb-src ${mirror%/} sid main" >"$apt_dir/sources.list"
apt_opts=(
    -o "Dir::Etc::SourceList=$apt_dir/sources.list"
    -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache=$apt_dir/cache"
    -o "APT::Sandbox::User=root"
)
timeout 300 apt-get "${apt_opts[@]}" update -qq
(cd "$work" && timeout 300 apt-get "${apt_opts[@]}" source --download-only -qq "criu=$version-1") \
    >"$work/source.log" 2>&1 || true
orig=$(find "$work" -maxdepth 1 -name "criu_${version}.orig.tar.*" | head -n1)
if [[ -z $orig ]]; then
    echo "build-criu: criu_${version}.orig.tar.* did not arrive; apt-get said:" >&2
    cat "$work/source.log" >&2
    exit 1
fi
mkdir -p "$work/src"
tar -xf "$orig" -C "$work/src" --strip-components=1
# -j2: the machines have two cores; about 25 s (TESTBED-NOTES).
timeout 900 make -C "$work/src" -j2 criu >"$work/build.log" 2>&1 || {
    tail -n 40 "$work/build.log" >&2
    echo "build-criu: make failed" >&2
    exit 1
}
rm -rf "$dest.tmp"
mkdir -p "$dest.tmp"
cp "$work/src/criu/criu" "$dest.tmp/criu"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
"$bin" --version | grep -q "Version: $version"
echo "$bin"
