#!/usr/bin/env bash
# run.sh: run every test binary, show their cmocka output, end with one summary line.
# A test binary that needs a missing model or GPU skips its cases (cmocka's skip()).
set -u
passed=0; failed=0; skipped=0; bad=()
for t in "$@"; do
  out=$(mktemp)
  "$t" >"$out" 2>&1
  rc=$?
  cat "$out"
  p=$(grep -oE '^\[  PASSED  \] [0-9]+' "$out" | grep -oE '[0-9]+$' | awk '{s+=$1} END {print s+0}')
  f=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$out" | grep -oE '[0-9]+' | awk '{s+=$1} END {print s+0}')
  s=$(grep -oE '^\[  SKIPPED \] [0-9]+' "$out" | grep -oE '[0-9]+$' | awk '{s+=$1} END {print s+0}')
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then failed=$((failed + 1)); fi
  [ $rc -ne 0 ] && bad+=("$(basename "$t")")
  rm -f "$out"
done
[ ${#bad[@]} -gt 0 ] && echo "failing test programs: ${bad[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ] && [ ${#bad[@]} -eq 0 ]
