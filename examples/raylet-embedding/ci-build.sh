#!/usr/bin/env bash
# Builds this example as a raylet would link librayaccel: install from the build tree into a
# scratch prefix, build against it with find_package(rayaccel COMPONENTS registry), then run it
# on the installed sim plugin, isolated. Usage: examples/raylet-embedding/ci-build.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/build" > "$work/build.log"

# The program finds librayaccel through its RUNPATH, the plugins next to it (lib/rayaccel).
if ! timeout 60 "$work/build/raylet-embedding-example" --plugin sim \
     --config "sim.spec=$root/examples/dgx-h100.json" --leases 50 > "$work/out.txt" 2> "$work/err.txt"; then
  echo "raylet-embedding: the example failed" >&2
  cat "$work/out.txt" "$work/err.txt" >&2
  exit 1
fi
if grep -q . <(grep -v '^\[raylet\] ' "$work/err.txt"); then
  echo "raylet-embedding: the library wrote to stderr past the log callback:" >&2
  cat "$work/err.txt" >&2
  exit 1
fi
case "$(head -1 "$work/out.txt")" in
  *"GPU=8 at generation 1 "*"leases granted 100, refused 0, failed 0; plugin hosts started 1;"*)
    echo "raylet-embedding: an out-of-tree host embedding librayaccel: $(head -1 "$work/out.txt")" ;;
  *) echo "raylet-embedding: unexpected output:" >&2; cat "$work/out.txt" "$work/err.txt" >&2; exit 1 ;;
esac
