#!/usr/bin/env bash
# The install as a vendor and an operator get it: each component (sdk, dev, runtime, tools,
# debug) into a prefix of its own, holding what it says and nothing of the others; every
# installed program, library and plugin stripped, with a debug link to its .debug file in the
# debug component (same build id); a plugin in C built from the sdk alone, with CMake and with
# pkg-config; the runtime and tools, stripped, discovering. Prints each component's size.
#   install_components_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "install components: $*" >&2; exit 1; }

for c in sdk dev runtime tools debug; do
  cmake --install "$build" --prefix "$work/$c" --component "$c" > "$work/$c.log"
done
# Nothing is left outside a component.
cmake --install "$build" --prefix "$work/unspecified" --component Unspecified > /dev/null
[ -z "$(find "$work/unspecified" -type f 2> /dev/null)" ] ||
  fail "files in no component: $(find "$work/unspecified" -type f | head -3)"

has() { [ -e "$work/$1/$2" ] || fail "$1 lacks $2"; }
for f in include/rayaccel/plugin.h include/rayaccel/transport_helpers.h \
         include/rayaccel/ucx_transport.h lib/cmake/rayaccel/rayaccelConfig.cmake \
         lib/cmake/rayaccel/RayaccelPlugin.cmake lib/pkgconfig/rayaccel-plugin.pc \
         lib/pkgconfig/rayaccel-transport.pc lib/librayaccel_transport_fabric.a; do
  has sdk "$f"
done
for f in lib/librayaccel.so.0 lib/rayaccel/plugins/librayaccel-cuda.so bin/rayaccel-plugin-host \
         bin/rayaccel-hwloc-check; do
  has runtime "$f"
done
for f in bin/rayaccel bin/rayaccel-agent bin/rayaccel-conformance share/rayaccel/deploy; do
  has tools "$f"
done
has dev lib/librayaccel_rpc.a
[ ! -e "$work/sdk/bin" ] || fail "the sdk installs programs: $(ls "$work/sdk/bin")"
[ -z "$(find "$work/sdk" -name '*.so*' -type f)" ] || fail "the sdk installs shared libraries"
[ ! -e "$work/runtime/include" ] || fail "the runtime installs headers"
[ -z "$(find "$work/runtime" "$work/tools" -name '*.debug')" ] ||
  fail "debug information outside the debug component"

# Stripped, each with the link to its debug file, whose build id is its own.
build_id() { readelf -n "$1" | awk '/Build ID/ { print $3 }'; }
count=0
while IFS= read -r -d '' f; do
  # Whole outputs, not pipes into grep -q: pipefail would count the writer's SIGPIPE.
  [[ $(file -b "$f") == ELF* ]] || continue
  [[ $(readelf -S "$f") != *.debug_info* ]] || fail "$f keeps its debug information"
  link=$(readelf --string-dump=.gnu_debuglink "$f" 2> /dev/null | awk '/\[ *0\]/ { print $3 }')
  [ "$link" = "$(basename "$f").debug" ] || fail "$f: debug link '$link'"
  rel=${f#"$work"/*/}
  debug="$work/debug/$(dirname "$rel")/.debug/$link"
  [ -f "$debug" ] || fail "no $debug for $f"
  [[ $(readelf -S "$debug") == *.debug_info* ]] || fail "$debug has no debug information"
  [ "$(build_id "$f")" = "$(build_id "$debug")" ] || fail "$debug is not $f's"
  count=$((count + 1))
done < <(find "$work/runtime" "$work/tools" -type f -print0)
[ "$count" -ge 14 ] || fail "only $count binaries checked"

# A C plugin with a transport from the sdk alone: CMake, then pkg-config.
cmake -S "$src/examples/plugin-transport-c" -B "$work/cplugin" -G Ninja --no-warn-unused-cli \
  -DCMAKE_PREFIX_PATH="$work/sdk" > "$work/cplugin.log" 2>&1 ||
  { cat "$work/cplugin.log" >&2; fail "configure against the sdk"; }
cmake --build "$work/cplugin" >> "$work/cplugin.log" 2>&1 ||
  { cat "$work/cplugin.log" >&2; fail "build against the sdk"; }
export PKG_CONFIG_PATH="$work/sdk/lib/pkgconfig"
# shellcheck disable=SC2046
cc -std=c99 -shared -fPIC -o "$work/librayaccel-acme-c.so" \
  "$src/examples/plugin-transport-c/transport_plugin.c" $(pkg-config --cflags --libs rayaccel-transport) \
  -Wl,--version-script="$work/sdk/lib/cmake/rayaccel/exports.map" ||
  fail "build with pkg-config rayaccel-transport"

sizes=$(for c in sdk dev runtime tools debug; do
  printf '%s %s, ' "$c" "$(du -sh "$work/$c" | cut -f1)"
done)
# The runtime and tools, stripped, work together.
cp -a "$work/runtime/." "$work/tools/"
"$work/tools/bin/rayaccel" discover --plugin sim --config "sim.spec=$src/examples/dgx-h100.json" \
  > "$work/discover.txt" || fail "the stripped CLI: $(cat "$work/discover.txt")"
grep -q "H100" "$work/discover.txt" || fail "discover: $(cat "$work/discover.txt")"
"$work/tools/bin/rayaccel-conformance" "$work/librayaccel-acme-c.so" --tier 3 > "$work/c.txt" ||
  { cat "$work/c.txt" >&2; fail "the pkg-config build below tier 3"; }

echo "install components: ${sizes}$count binaries stripped, each with its .debug"
