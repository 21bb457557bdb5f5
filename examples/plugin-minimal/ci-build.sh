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
# The plugin component needs nothing but the install: configured with Abseil, spdlog,
# Protobuf and gRPC made unfindable, as on a vendor's build machine that has none of them.
no_deps=(-DCMAKE_DISABLE_FIND_PACKAGE_absl=ON -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON
  -DCMAKE_DISABLE_FIND_PACKAGE_Protobuf=ON -DCMAKE_DISABLE_FIND_PACKAGE_gRPC=ON)
cmake -S "$here" -B "$work/build" -G Ninja --no-warn-unused-cli -DCMAKE_PREFIX_PATH="$work/prefix" \
  "${no_deps[@]}" \
  > "$work/configure.log" || { cat "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" > "$work/build.log"
# ... and the registry is what needs them: asking for it there fails.
mkdir -p "$work/host"
printf 'cmake_minimum_required(VERSION 3.22)\nproject(host CXX)\nfind_package(rayaccel REQUIRED COMPONENTS registry)\n' \
  > "$work/host/CMakeLists.txt"
if cmake -S "$work/host" -B "$work/host/build" -DCMAKE_PREFIX_PATH="$work/prefix" "${no_deps[@]}" \
  > "$work/host.log" 2>&1 || ! grep -q absl "$work/host.log"; then
  echo "plugin-minimal: the registry component did not fail for want of Abseil" >&2
  cat "$work/host.log" >&2
  exit 1
fi
# Without CMake: the header alone, through pkg-config, and every path follows the prefix.
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
cc -std=c99 -Wall -Wextra -Werror -pedantic -fPIC -shared $(pkg-config --cflags rayaccel-plugin) \
  -o "$work/librayaccel-minimal-pc.so" "$here/minimal_plugin.c"
[ "$(pkg-config --variable=plugindir rayaccel)" = "$work/prefix/lib/rayaccel/plugins" ] ||
  { echo "rayaccel.pc plugindir: $(pkg-config --variable=plugindir rayaccel)" >&2; exit 1; }
[ "$(pkg-config --variable=plugindir rayaccel-plugin)" = "$work/prefix/lib/rayaccel/plugins" ] ||
  { echo "rayaccel-plugin.pc plugindir is off" >&2; exit 1; }

plugin="$work/build/librayaccel-minimal.so"
exported=$(nm -D --defined-only "$plugin" | awk '{print $3}' | grep -v '^$' | sort | tr '\n' ' ')
if [ "$exported" != "rayaccel_plugin_entry " ]; then
  echo "plugin-minimal: exports '$exported', expected only rayaccel_plugin_entry" >&2
  exit 1
fi
out=$("$work/prefix/bin/rayaccel" resources --json --plugin "$plugin")
echo "plugin-minimal: installed rayaccel loaded the out-of-tree plugin: $out"
[ "$out" = '{"accelerator_type:Acme-X1": 1, "acme_x1": 2}' ] || { echo "unexpected: $out" >&2; exit 1; }
# Its own interconnect, by name, in the matrix.
"$work/prefix/bin/rayaccel" topo --plugin "$plugin" | grep -Eq "^acme_x1-0 +X +AXL4" ||
  { "$work/prefix/bin/rayaccel" topo --plugin "$plugin" >&2; exit 1; }
# The installed conformance suite: schedulable (tier 2); no transport, so not tier 3.
"$work/prefix/bin/rayaccel-conformance" "$plugin" --tier 2 > "$work/conformance.txt" ||
  { cat "$work/conformance.txt" >&2; exit 1; }
grep -q "Tier reached: 2 (schedulable)" "$work/conformance.txt" ||
  { cat "$work/conformance.txt" >&2; exit 1; }
# The install tree finds its own plugins without RAYACCEL_PLUGIN_PATH; the simulator only when
# asked for by name.
"$work/prefix/bin/rayaccel" plugins | grep -q '^cuda ' || { echo "installed CLI misses cuda" >&2; exit 1; }
"$work/prefix/bin/rayaccel" plugins | grep -q '^sim ' && { echo "installed CLI loads sim unasked" >&2; exit 1; }
"$work/prefix/bin/rayaccel" plugins --plugin sim | grep -q '^sim ' ||
  { echo "installed CLI misses sim" >&2; exit 1; }
pkg-config --cflags --libs rayaccel > /dev/null
echo "plugin-minimal: OK"
