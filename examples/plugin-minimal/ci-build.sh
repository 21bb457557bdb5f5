#!/usr/bin/env bash
# Builds this example as a vendor would: install rayaccel from the build tree into a scratch
# prefix, build the plugin against that install with find_package(rayaccel), then have the
# installed CLI load it. Usage: examples/plugin-minimal/ci-build.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/build" > "$work/build.log"

plugin="$work/build/librayaccel-minimal.so"
exported=$(nm -D --defined-only "$plugin" | awk '{print $3}' | grep -v '^$' | sort | tr '\n' ' ')
if [ "$exported" != "rayaccel_plugin_entry " ]; then
  echo "plugin-minimal: exports '$exported', expected only rayaccel_plugin_entry" >&2
  exit 1
fi
out=$("$work/prefix/bin/rayaccel" resources --json --plugin "$plugin")
echo "plugin-minimal: installed rayaccel loaded the out-of-tree plugin: $out"
[ "$out" = '{"accelerator_type:Acme-X1": 1, "acme_x1": 1}' ] || { echo "unexpected: $out" >&2; exit 1; }
# The installed conformance suite: discoverable (tier 1); no topology hook, so not tier 2.
"$work/prefix/bin/rayaccel-conformance" "$plugin" --tier 1 > "$work/conformance.txt" ||
  { cat "$work/conformance.txt" >&2; exit 1; }
grep -q "Tier reached: 1 (discoverable)" "$work/conformance.txt" ||
  { cat "$work/conformance.txt" >&2; exit 1; }
# The install tree finds its own plugins without RAYACCEL_PLUGIN_PATH.
"$work/prefix/bin/rayaccel" plugins | grep -q '^sim ' || { echo "installed CLI misses sim" >&2; exit 1; }
PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" pkg-config --cflags --libs rayaccel > /dev/null
echo "plugin-minimal: OK"
