#!/usr/bin/env bash
# make-profiles.sh: rebuild every shipped profile, its calibration files and its report from
# the evaluation data sets (data/, fetched by scripts/fetch-data.sh), with the commands the shipped files were made with (`make profiles`).
#
#   scripts/make-profiles.sh [smollm2|qwen]...     (default: both)
#
# Environment: SKV_DEPTH_EVAL (1: the Qwen profile's depth is checked by `smallkv eval depth`,
# ~10 min; 0: mapgen's depth alone), BUILD (build), SKV_DATA_DIR (data), SKV_MODELS_DIR (models), OUT (profiles:
# where the .calib and .skvprof files go; the Qwen report goes to $OUT/../docs/ only when OUT
# is profiles). Work files live in $BUILD/profiles-work/ and calibrate resumes them, so an
# interrupted run continues where it stopped; the results are written beside their final
# name and renamed into place only when complete.
#
# Corpora are named, not located: the files record "wikitext2" and "pg-essays-first10" with
# their sha256, so a profile says what it was calibrated on without naming one machine's
# paths. pg-essays-first10 is the first ten essays (file names in byte order) concatenated.
#
# SKV_PACK=0: the shipped files were computed with the weights in the files' own row layout;
# the default 8-row regrouping changes the forward pass by float rounding, which moves the
# similarity sums in their last bits and can flip near-tied head choices. With SKV_PACK=0 a
# rebuild reproduces the shipped similarity sections exactly (docs/calibration.md).
set -euo pipefail
root=$(git rev-parse --show-toplevel 2>/dev/null || pwd)
cd "$root"
BUILD=${BUILD:-build}
DATA=${SKV_DATA_DIR:-data}
MODELS=${SKV_MODELS_DIR:-models}
OUT=${OUT:-profiles}
export SKV_PACK=0 OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
work=$BUILD/profiles-work
mkdir -p "$work" "$OUT"
cal=$BUILD/bin/calibrate
map=$BUILD/bin/mapgen
for t in "$cal" "$map"; do
    [ -x "$t" ] || { echo "make-profiles: $t missing (make tools)" >&2; exit 2; }
done
need() { [ -f "$1" ] || { echo "make-profiles: $1 missing ($2)" >&2; exit 2; }; }

wiki=$DATA/wikitext2/wiki.test.raw
SKV_DATA_DIR=$DATA scripts/fetch-data.sh wikitext2 pg-essays || exit 2
need "$wiki" "scripts/fetch-data.sh wikitext2"
pg=$work/pg-essays-first10.txt
if [ ! -f "$pg" ]; then
    files=$(ls "$DATA"/pg-essays/*.txt | LC_ALL=C sort | head -10)
    [ -n "$files" ] || { echo "make-profiles: no essays in $DATA/pg-essays" >&2; exit 2; }
    cat $files > "$pg.tmp" && mv "$pg.tmp" "$pg"
fi
PG_SHA=26c03330da304c7a4523c08d885516e2bfa2fc0db70827ef842d2221093dc265
if [ "$(sha256sum "$pg" | cut -d' ' -f1)" != "$PG_SHA" ]; then
    echo "make-profiles: warning: $pg differs from the shipped profile's essay corpus (sha256 $PG_SHA)" >&2
fi

# finish NAME: move work/NAME.new to OUT/NAME
finish() { mv "$work/$1.new" "$OUT/$1"; echo "make-profiles: wrote $OUT/$1"; }
step() { echo "make-profiles: $*"; }

smollm2() {
    local m=$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf
    need "$m" "make models-test"
    step "SmolLM2-135M self pair: 16 windows of 512 tokens of wikitext2"
    "$cal" --slm "$m" --llm "$m" --corpus "wikitext2=$wiki" --windows 16 --checkpoint-every 4 \
        -o "$work/smollm2-135m-self.calib" --resume
    "$map" "$work/smollm2-135m-self.calib" -o "$work/smollm2-135m-self.skvprof.new"
    cp "$work/smollm2-135m-self.calib" "$work/smollm2-135m-self.calib.new"
    finish smollm2-135m-self.calib
    finish smollm2-135m-self.skvprof
}

qwen() {
    local s=$MODELS/qwen2.5-coder-0.5b.gguf l=$MODELS/qwen2.5-coder-1.5b.gguf
    need "$s" "make models"; need "$l" "make models"
    local names=(wikitext2 pg-essays)
    for c in 0 1; do
        step "Qwen2.5-Coder 0.5B -> 1.5B: corpus $c (${names[$c]}), 16 of 32 windows of 512 tokens"
        "$cal" --slm "$s" --llm "$l" --corpus "wikitext2=$wiki" --corpus "pg-essays-first10=$pg" \
            --window 512 --windows 32 --only-corpus $c --checkpoint-every 1 \
            -o "$work/qwen-corpus$c.calib" --resume
    done
    local report=$work/calibration-qwen2.5-coder.html.new
    "$map" "$work/qwen-corpus0.calib" "$work/qwen-corpus1.calib" \
        -o "$work/qwen-mapped.skvprof" --report "$report"
    if [ "${SKV_DEPTH_EVAL:-1}" = 1 ]; then
        # the depth checked by fidelity and written into the profile with its table
        # (KL reproduces; the SLM times are this machine's)
        step "Qwen2.5-Coder 0.5B -> 1.5B: SmallKV's fidelity and SLM time at SLM depths 8-24 (smallkv eval depth)"
        "$BUILD/bin/smallkv" eval depth --llm "$l" --slm "$s" --profile "$work/qwen-mapped.skvprof" \
            --slm-depths 8,12,16,20,23,24 --limit 1 --data "$DATA" -o "$work/qwen-depth.json" \
            --write-profile "$work/qwen2.5-coder-0.5b-1.5b.skvprof.new"
    else
        cp "$work/qwen-mapped.skvprof" "$work/qwen2.5-coder-0.5b-1.5b.skvprof.new"
    fi
    cp "$work/qwen-corpus0.calib" "$work/qwen2.5-coder-0.5b-1.5b.wikitext2.calib.new"
    cp "$work/qwen-corpus1.calib" "$work/qwen2.5-coder-0.5b-1.5b.pg-essays.calib.new"
    finish qwen2.5-coder-0.5b-1.5b.wikitext2.calib
    finish qwen2.5-coder-0.5b-1.5b.pg-essays.calib
    finish qwen2.5-coder-0.5b-1.5b.skvprof
    if [ "$OUT" = profiles ]; then
        mv "$report" docs/calibration-qwen2.5-coder.html
        echo "make-profiles: wrote docs/calibration-qwen2.5-coder.html"
    fi
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(smollm2 qwen)
for t in "${targets[@]}"; do
    case $t in
        smollm2|qwen) "$t" ;;
        *) echo "make-profiles: unknown profile '$t' (smollm2, qwen)" >&2; exit 2 ;;
    esac
done
