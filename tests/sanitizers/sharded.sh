#!/usr/bin/env bash
# Runs a GoogleTest binary as SHARDS processes side by side (GoogleTest's own sharding: each
# runs every SHARDS-th test), as ctest -j runs the same tests one by one: the binary's tests
# share no state. Each shard's output goes to BINARY.shard-N.log; prints each shard's summary,
# and the whole log of any shard that failed.
# Usage: tests/sanitizers/sharded.sh SHARDS BINARY [GTEST ARGS...]
set -uo pipefail
shards=$1 binary=$2
shift 2
pids=()
for ((i = 0; i < shards; i++)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$binary" "$@" > "$binary.shard-$i.log" 2>&1 &
  pids+=($!)
done
failed=0
for ((i = 0; i < shards; i++)); do
  if wait "${pids[$i]}"; then
    echo "shard $i of $shards: $(grep -E '^\[  PASSED  \]' "$binary.shard-$i.log")"
  else
    failed=1
    echo "shard $i of $shards FAILED:"
    cat "$binary.shard-$i.log"
  fi
done
exit $failed
