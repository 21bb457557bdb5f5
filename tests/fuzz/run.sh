#!/usr/bin/env bash
# Runs every libFuzzer target of a `fuzz` preset build for SECONDS each, starting from the
# seed corpus in tests/fuzz/corpus and adding what it finds under BUILD_DIR/corpus. Prints each
# target's executions, time and findings; a crash leaves its input in BUILD_DIR/crashes/ (copy
# it to tests/fuzz/regressions/<target>/ once fixed) and fails the run.
# Targets run side by side, one per core (FUZZ_JOBS to choose).
# Usage: tests/fuzz/run.sh [BUILD_DIR] [SECONDS]
set -uo pipefail
build=${1:-build-fuzz}
seconds=${2:-300}
root=$(cd "$(dirname "$0")/../.." && pwd)
jobs=${FUZZ_JOBS:-$(nproc)}
mkdir -p "$build/crashes"

one() {  # fuzzer -> its line of the table in $build/crashes/<name>.line; fails on a finding
  local fuzzer=$1 name corpus log extra rc runs time rate result
  name=$(basename "$fuzzer"); name=${name#fuzz_}
  corpus="$build/corpus/$name"
  mkdir -p "$corpus"
  log="$build/crashes/$name.log"
  # The transport target runs UCX's threads: LeakSanitizer stops the world to scan, and its
  # tracer can crash on them ("Tracer caught signal 11"), between inputs and, now and then on a
  # loaded machine, at exit too. So that target checks no leaks here (make asan-transport
  # checks the transport's leaks test by test).
  extra=()
  leaks=1
  [ "$name" = transport ] && extra=(-detect_leaks=0) && leaks=0
  ASAN_OPTIONS=detect_leaks=$leaks UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
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
  fi
  printf '%-16s %12s %8s %10s  %s\n' "$name" "${runs:-?}" "${time:-$seconds}" "${rate:-?}" \
    "$result" > "$build/crashes/$name.line"
}

# A target per core at a time; the table in the targets' order once all have run.
rm -f "$build"/crashes/*.line
for fuzzer in "$build"/bin/fuzz_*; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  one "$fuzzer" &
done
wait
failed=0
printf '%-16s %12s %8s %10s  %s\n' target executions seconds "exec/s" result
for fuzzer in "$build"/bin/fuzz_*; do
  name=$(basename "$fuzzer"); name=${name#fuzz_}
  line="$build/crashes/$name.line"
  if [ -f "$line" ]; then cat "$line"; else echo "$name: did not report"; fi
  { [ -f "$line" ] && ! grep -q FAILED "$line"; } || failed=1
done
exit $failed
