#!/usr/bin/env bash
# run.sh SECONDS TARGET...: run each libFuzzer target (build-fuzz/fuzz_TARGET) for SECONDS on
# its committed seeds (fuzz/corpus/TARGET, read only) plus a working corpus
# (fuzz-out/TARGET/corpus), with its dictionary (fuzz/TARGET.dict) if there is one.
# Crashing inputs go to fuzz-out/TARGET/; the log to fuzz-out/TARGET.log. Ends with one
# line per target (execs/s, cov, ft, crashed?) and fails if any target crashed.
set -u
secs=$1; shift
B=${FUZZ_BUILD:-build-fuzz}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# inputs the readers could take (bytes)
max_len() {
  case $1 in
    tokenize) echo 4096 ;;
    hf_config) echo 16384 ;;
    *) echo 65536 ;;
  esac
}
summary=(); failed=0
for t in "$@"; do
  mkdir -p "fuzz-out/$t/corpus"
  dict=(); [ -f "fuzz/$t.dict" ] && dict=("-dict=fuzz/$t.dict")
  echo "== fuzz_$t for ${secs}s"
  "$B/fuzz_$t" "fuzz-out/$t/corpus" "fuzz/corpus/$t" "${dict[@]}" \
    -max_total_time="$secs" -max_len="$(max_len "$t")" -timeout=20 -rss_limit_mb=2048 \
    -artifact_prefix="fuzz-out/$t/" -print_final_stats=1 >"fuzz-out/$t.log" 2>&1
  rc=$?
  last=$(grep -E '^#[0-9]+' "fuzz-out/$t.log" | tail -1)
  eps=$(grep -oE 'average_exec_per_sec: *[0-9]+' "fuzz-out/$t.log" | grep -oE '[0-9]+$')
  cov=$(echo "$last" | grep -oE 'cov: [0-9]+' | grep -oE '[0-9]+')
  ft=$(echo "$last" | grep -oE 'ft: [0-9]+' | grep -oE '[0-9]+')
  execs=$(grep -oE 'number_of_executed_units: *[0-9]+' "fuzz-out/$t.log" | grep -oE '[0-9]+$')
  status=ok
  if [ $rc -ne 0 ]; then status="CRASH (rc $rc, see fuzz-out/$t.log and fuzz-out/$t/)"; failed=1; fi
  summary+=("$(printf '%-15s %6ss %10s execs %7s exec/s cov %6s ft %6s  %s' "$t" "$secs" "${execs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" "$status")")
done
printf '%s\n' "${summary[@]}"
exit $failed
