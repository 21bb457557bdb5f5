#!/usr/bin/env bash
# The Bazel build (BUILD.bazel, offline against the system's libraries: WORKSPACE.bazel),
# checked against what CMake's build guarantees: librayaccel.so exports host.h's functions
# alone; the C99 host of host.h runs on Bazel's library, plugin host and sim plugin; the
# conformance suite (CMake's) takes Bazel's sim plugin to tier 3 and the other four to tier 1.
# Usage: tests/bazel/build_and_check.sh CMAKE_BUILD_DIR
set -euo pipefail
cmake_build=$(cd "${1:?cmake build dir}" && pwd)
cd "$(dirname "$0")/../.."
bazel build --jobs="$(nproc)" //... 2> /tmp/rayaccel-bazel.log ||
  { tail -40 /tmp/rayaccel-bazel.log >&2; exit 1; }
bin=$(bazel info bazel-bin 2> /dev/null)

exported=$(nm -D --defined-only "$bin/librayaccel.so" | awk '$2 ~ /^[A-Z]$/ { print $3 }' |
           sed 's/@.*//')
foreign=$(echo "$exported" | grep -v -E '^(rayaccel_[a-z0-9_]+|RAYACCEL_0)$' || true)
[ -z "$foreign" ] || { echo "bazel: librayaccel.so exports more than host.h: $foreign" >&2; exit 1; }

out=$("$bin/host_c_user" "$bin/plugins" examples/dgx-h100.json "$bin/rayaccel-plugin-host")
[ "$out" = ok ] || { echo "bazel: the C host on Bazel's library: $out" >&2; exit 1; }

suite="$cmake_build/bin/rayaccel-conformance"
"$suite" "$bin/plugins/librayaccel-sim.so" --config spec=examples/dgx-h100.json --tier 3 > /dev/null
FI_PROVIDER=tcp "$suite" "$bin/plugins/librayaccel-sim.so" --config spec=examples/dgx-h100.json \
  --config transport_fabric=libfabric --tier 3 > /dev/null
for plugin in cuda rocm tpu gaudi neuron ascend intel_gpu; do
  "$suite" "$bin/plugins/librayaccel-$plugin.so" --tier 1 > /dev/null
done
version=$(dpkg-query -W -f='${Version}' bazel-bootstrap 2> /dev/null || echo unknown)
echo "bazel: built //... (bazel-bootstrap $version):" \
  "librayaccel.so exports $(echo "$exported" | grep -c '^rayaccel_') host.h functions alone;" \
  "the C host runs on it; sim plugin tier 3 (UCX and libfabric), cuda, rocm, tpu, gaudi, neuron, ascend, intel_gpu tier 1"
