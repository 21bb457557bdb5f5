#!/usr/bin/env bash
# Builds this example as a vendor would: install rayaccel from the build tree into a scratch
# prefix, build the plugin against the installed UCX helper, then run the installed
# conformance suite to tier 3 (transport) on it. Usage: examples/plugin-transport/ci-build.sh
# BUILD_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
# Neither UCX's headers nor Abseil, spdlog, Protobuf or gRPC are needed to build it.
no_deps=(-DCMAKE_DISABLE_FIND_PACKAGE_absl=ON -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON
  -DCMAKE_DISABLE_FIND_PACKAGE_Protobuf=ON -DCMAKE_DISABLE_FIND_PACKAGE_gRPC=ON)
cmake -S "$here" -B "$work/build" -G Ninja --no-warn-unused-cli \
  -DCMAKE_PREFIX_PATH="$work/prefix" "${no_deps[@]}" > "$work/configure.log" ||
  { cat "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" > "$work/build.log" || { cat "$work/build.log" >&2; exit 1; }

plugin="$work/build/librayaccel-acme-transport.so"
exported=$(nm -D --defined-only "$plugin" | awk '{print $3}' | grep -v '^$' | sort | tr '\n' ' ')
if [ "$exported" != "rayaccel_plugin_entry " ]; then
  echo "plugin-transport: exports '$exported', expected only rayaccel_plugin_entry" >&2
  exit 1
fi
"$work/prefix/bin/rayaccel-conformance" "$plugin" --tier 3 > "$work/conformance.txt" ||
  { cat "$work/conformance.txt" >&2; exit 1; }
grep -q "Tier reached: 3 (transport)" "$work/conformance.txt" ||
  { cat "$work/conformance.txt" >&2; exit 1; }
grep -E "transport\." "$work/conformance.txt"
echo "plugin-transport: OK (tier 3 through the installed UCX helper)"
