#!/bin/sh
# rayaccel's transport against NIXL (Ray's RDT backend) on one host: host memory between two
# processes, READ and WRITE, 8 B to 64 MiB, single transfers and lists of 64 and 1024, NIXL's
# UCX backend in both error modes; ratios in one run (bench/compare_nixl.py).
#   bench/compare_nixl.sh [BUILD_DIR] [compare_nixl.py options]
# Needs NIXL (requirements.txt pins nixl-cu12, installed by make into BUILD_DIR/venv).
set -eu
build=${1:-build}
[ $# -gt 0 ] && shift
python="$build/venv/bin/python"
"$python" -c 'import nixl_cu12' 2>/dev/null || {
  echo "compare_nixl.sh: NIXL is not installed in $build/venv (run make)" >&2; exit 2; }
exec "$python" "$(dirname "$0")/compare_nixl.py" "$build" --python "$python" "$@"
