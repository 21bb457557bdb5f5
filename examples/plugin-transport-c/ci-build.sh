#!/usr/bin/env bash
# Builds this example as a C vendor would: install rayaccel's sdk component from the build tree
# into a scratch prefix, build the plugin against the installed helpers' C interface, then
# install the runtime and tools and run the conformance suite to tier 3 (transport) on it, over
# UCX and over libfabric.
# Usage: examples/plugin-transport-c/ci-build.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

# The sdk component alone builds it (headers, CMake package, pkg-config, the helpers).
cmake --install "$build" --prefix "$work/prefix" --component sdk > "$work/install.log"
no_deps=(-DCMAKE_DISABLE_FIND_PACKAGE_absl=ON -DCMAKE_DISABLE_FIND_PACKAGE_spdlog=ON
  -DCMAKE_DISABLE_FIND_PACKAGE_Protobuf=ON -DCMAKE_DISABLE_FIND_PACKAGE_gRPC=ON)
cmake -S "$here" -B "$work/build" -G Ninja --no-warn-unused-cli \
  -DCMAKE_PREFIX_PATH="$work/prefix" "${no_deps[@]}" > "$work/configure.log" ||
  { cat "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" > "$work/build.log" || { cat "$work/build.log" >&2; exit 1; }

plugin="$work/build/librayaccel-acme-c.so"
exported=$(nm -D --defined-only "$plugin" | awk '{print $3}' | grep -v '^$' | sort | tr '\n' ' ')
if [ "$exported" != "rayaccel_plugin_entry " ]; then
  echo "plugin-transport-c: exports '$exported', expected only rayaccel_plugin_entry" >&2
  exit 1
fi
# The suite, to run it: the runtime and tools components.
for component in runtime tools; do
  cmake --install "$build" --prefix "$work/prefix" --component "$component" >> "$work/install.log"
done
suite="$work/prefix/bin/rayaccel-conformance"
"$suite" "$plugin" --tier 3 > "$work/ucx.txt" || { cat "$work/ucx.txt" >&2; exit 1; }
grep -q "Tier reached: 3 (transport)" "$work/ucx.txt" || { cat "$work/ucx.txt" >&2; exit 1; }
FI_PROVIDER=tcp "$suite" "$plugin" --config transport_fabric=libfabric --tier 3 \
  > "$work/libfabric.txt" || { cat "$work/libfabric.txt" >&2; exit 1; }
grep -q "Tier reached: 3 (transport)" "$work/libfabric.txt" ||
  { cat "$work/libfabric.txt" >&2; exit 1; }
# The fabric the host asked for is the one used: a name that is neither is refused, naming it.
if "$suite" "$plugin" --config transport_fabric=carrier-pigeon --tier 3 > "$work/bad.txt"; then
  echo "plugin-transport-c: transport_fabric=carrier-pigeon reached tier 3" >&2
  exit 1
fi
grep -q 'carrier-pigeon' "$work/bad.txt" || { cat "$work/bad.txt" >&2; exit 1; }
grep -E "transport\." "$work/ucx.txt"
echo "plugin-transport-c: OK (a C plugin at tier 3 through the installed helpers, UCX and libfabric)"
