#!/usr/bin/env bash
# Unpacks the Debian source of an installed package's exact version (its patches applied) into
# DEST, through apt with a private state of its own: the system's apt configuration and lists
# are left as they are, and no root is needed. Used to build Abseil as position-independent
# static archives (Debian ships them non-PIC), so that librayaccel.so can carry it inside.
# Usage: cmake/fetch_debian_source.sh SOURCE_PACKAGE BINARY_PACKAGE DEST
set -euo pipefail
source_package=$1 binary_package=$2 dest=$3
version=$(dpkg-query -W -f='${source:Version}' "$binary_package")
[ -f "$dest/.version" ] && [ "$(cat "$dest/.version")" = "$version" ] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. /etc/os-release
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null |
         head -1)
mirror=${mirror:-http://deb.debian.org/debian}
printf 'deb-src %s %s main\ndeb-src %s %s-updates main\n' "$mirror" "$VERSION_CODENAME" \
  "$mirror" "$VERSION_CODENAME" > "$work/sources.list"
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
apt_private=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=-
             -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache"
             -o Debug::NoLocking=1 -o APT::Sandbox::User=root -qq)
apt-get "${apt_private[@]}" update > "$work/update.log" 2>&1 ||
  { cat "$work/update.log" >&2; exit 1; }
(cd "$work" && apt-get "${apt_private[@]}" source --download-only \
  "$source_package=$version" > "$work/source.log" 2>&1) ||
  { cat "$work/source.log" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$(dirname "$dest")"
dpkg-source --no-check -x "$work/${source_package}_${version#*:}.dsc" "$dest" > /dev/null
echo "$version" > "$dest/.version"
