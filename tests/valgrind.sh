#!/usr/bin/env bash
# valgrind.sh: run the CLI's main paths under valgrind memcheck (`make valgrind`); fails on
# any memory error or leak (definite, indirect or possible), see docs/robustness.md.
#   smallkv info / generate -n 8 / ppl --max-tokens 256 on the CI model (SmolLM2), and mapgen
#   (+ HTML report) on the small calibration file from the fuzz seeds.
# The model runs are skipped (reported, not failed) when the model file is missing.
# VG_PPL_TOKENS (default 64) sets ppl's --max-tokens: valgrind runs the model ~50x slower,
# so 256 tokens take tens of minutes on a loaded 2-core machine.
# OMP_NUM_THREADS=2 keeps OpenMP's worker pool in play (what the suppressions are for) at a
# bearable speed: valgrind runs threads one at a time.
set -u
B=${BUILD:-build}
M=${SKV_MODELS_DIR:-models}/SmolLM2-135M-Instruct.Q4_1.gguf
SUPP=tests/valgrind.supp
PPL_TOKENS=${VG_PPL_TOKENS:-64}
VG=(valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect,possible
    --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 --track-origins=no
    --suppressions="$SUPP" --quiet)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0; skip=0; failed=()
run() {   # run NAME CMD...
  local name=$1; shift
  local t0=$SECONDS
  "${VG[@]}" --log-file="$tmp/$name.vg" "$@" >"$tmp/$name.out" 2>&1
  local rc=$?
  if [ $rc -eq 0 ] && [ ! -s "$tmp/$name.vg" ]; then
    echo "ok    $name ($((SECONDS - t0))s)"; pass=$((pass + 1))
  else
    echo "FAIL  $name (exit $rc, $((SECONDS - t0))s)"; fail=$((fail + 1)); failed+=("$name")
    tail -n 20 "$tmp/$name.out"; cat "$tmp/$name.vg"
  fi
}
if [ -f "$M" ]; then
  run info "$B/bin/smallkv" info "$M"
  run generate "$B/bin/smallkv" generate "$M" --prompt "The capital of France is" -n 8
  run generate_chat "$B/bin/smallkv" generate "$M" --chat --system "Be brief." --prompt "Hi" -n 4
  run ppl "$B/bin/smallkv" ppl "$M" docs/models.md --max-tokens "$PPL_TOKENS"
else
  echo "skip  info/generate/generate_chat/ppl: $M missing"; skip=$((skip + 4))
fi
# a bad model must fail cleanly (error, no leak)
printf 'GGUF\003\000\000\000' >"$tmp/bad.gguf"
"${VG[@]}" --log-file="$tmp/bad.vg" "$B/bin/smallkv" info "$tmp/bad.gguf" >/dev/null 2>&1
rc=$?
if [ $rc -ne 99 ] && [ $rc -ne 0 ] && [ ! -s "$tmp/bad.vg" ]; then echo "ok    info_bad_file (exit $rc)"; pass=$((pass + 1))
else echo "FAIL  info_bad_file (exit $rc)"; cat "$tmp/bad.vg"; fail=$((fail + 1)); failed+=(info_bad_file); fi
if [ -x "$B/bin/mapgen" ] && [ -f fuzz/corpus/calib/raw_three_metrics ]; then
  tail -c +2 fuzz/corpus/calib/raw_three_metrics >"$tmp/small.skvcalib"   # byte 0 is the fuzz mode
  run mapgen "$B/bin/mapgen" "$tmp/small.skvcalib" -o "$tmp/small.skvprof" --report "$tmp/report.html"
else
  echo "skip  mapgen: $B/bin/mapgen or the calibration seed missing"; skip=$((skip + 1))
fi
[ ${#failed[@]} -gt 0 ] && echo "failing: ${failed[*]}"
echo "valgrind: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
