#!/usr/bin/env bash
# Runs every libFuzzer target of a `fuzz` preset build for SECONDS each, starting from the
# seed corpus in tests/fuzz/corpus and adding what it finds under BUILD_DIR/corpus. Prints each
# target's executions, time and findings; a crash leaves its input in BUILD_DIR/crashes/ (copy
# it to tests/fuzz/regressions/<target>/ once fixed) and fails the run.
# Usage: tests/fuzz/run.sh [BUILD_DIR] [SECONDS]
set -uo pipefail
build=${1:-build-fuzz}
seconds=${2:-300}
root=$(cd "$(dirname "$0")/../.." && pwd)
failed=0
mkdir -p "$build/crashes"
printf '%-16s %12s %8s %10s  %s\n' target executions seconds "exec/s" result
for fuzzer in "$build"/bin/fuzz_*; do
  name=$(basename "$fuzzer"); name=${name#fuzz_}
  corpus="$build/corpus/$name"
  mkdir -p "$corpus"
  log="$build/crashes/$name.log"
  # The transport target runs UCX's threads: LeakSanitizer's scan between inputs stops the
  # world and crashes on them, so it checks leaks only at exit (make asan-transport checks the
  # transport's leaks test by test).
  extra=()
  [ "$name" = transport ] && extra=(-detect_leaks=0)
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$fuzzer" "${extra[@]}" -max_total_time="$seconds" -print_final_stats=1 -rss_limit_mb=2048 \
    -artifact_prefix="$build/crashes/$name-" "$corpus" "$root/tests/fuzz/corpus/$name" \
    > "$log" 2>&1
  rc=$?
  runs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$log")
  time=$(awk '/stat::total_time/ { print $2 }' "$log" 2>/dev/null)
  rate=$(awk '/stat::average_exec_per_sec/ { print $2 }' "$log")
  result=ok
  if [ "$rc" -ne 0 ]; then
    result="FAILED (exit $rc): $(grep -m1 -E 'ERROR|SUMMARY|runtime error' "$log")"
    failed=1
  fi
  printf '%-16s %12s %8s %10s  %s\n' "$name" "${runs:-?}" "${time:-$seconds}" "${rate:-?}" "$result"
done
exit $failed
