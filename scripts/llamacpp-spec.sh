#!/usr/bin/env bash
# llamacpp-spec.sh: llama.cpp's speculative example on the same two GGUF files and prompts as
# scripts/spec-bench.sh (Qwen2.5-Coder 0.5B drafting for 1.5B, greedy, 128 tokens), for
# docs/performance.md. llama.cpp is not part of smallkv: build it yourself from a source tree
# you fetch (e.g. the llama-cpp-python sdist on PyPI vendors one under vendor/llama.cpp):
#   cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON
#   cmake --build build -j2 --target llama-speculative-simple llama-bench
# then: LLAMA_BIN=/path/to/llama.cpp/build/bin scripts/llamacpp-spec.sh
# Prints per prompt: plain decode tok/s (llama-bench tg at the prompt's length as depth) and
# speculative-simple's decode tok/s, drafted and accepted counts for each K.
# Environment: LLAMA_BIN (required), OMP_NUM_THREADS / SPEC_THREADS (2), SPEC_N (128),
# SPEC_KS ("2 4 6"), SPEC_PROMPTS ("he0 he10 gsm0").
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
: "${LLAMA_BIN:?set LLAMA_BIN to a llama.cpp build/bin folder}"
T=${SPEC_THREADS:-${OMP_NUM_THREADS:-2}}
N=${SPEC_N:-128}
KS=${SPEC_KS:-"2 4 6"}
PROMPTS=${SPEC_PROMPTS:-"he0 he10 gsm0"}
LLM=models/qwen2.5-coder-1.5b.gguf
SLM=models/qwen2.5-coder-0.5b.gguf
for f in $LLM $SLM "$LLAMA_BIN/llama-speculative-simple" "$LLAMA_BIN/llama-bench"; do
    [ -e "$f" ] || { echo "llamacpp-spec: $f missing" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 scripts/spec-prompts.py "$tmp"
echo "# llamacpp-spec: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $T threads, $N tokens"
printf '%-8s %5s %9s %7s %9s %9s\n' prompt K tok/s ratio drafted accepted
for p in $PROMPTS; do
    # plain: llama-bench's token generation after a prompt of the same length
    np=$(wc -c <"$tmp/$p.txt"); np=$((np / 4))
    plain=$("$LLAMA_BIN/llama-bench" -m $LLM -t $T -p 0 -n $N -d $np -o csv 2>/dev/null | tail -1 | awk -F, '{gsub(/"/,"",$0); print $(NF-1)}')
    printf '%-8s %5s %9s %7s %9s %9s\n' $p 0 "$plain" 1.00 - -
    for k in $KS; do
        "$LLAMA_BIN/llama-speculative-simple" -m $LLM -md $SLM -t $T -td $T -n $N --temp 0 --top-k 1 --ignore-eos --spec-type draft-simple \
            --spec-draft-n-max $k --spec-draft-n-min 0 -f "$tmp/$p.txt" >"$tmp/$p.$k.out" 2>"$tmp/$p.$k.err" || true
        tps=$(sed -n 's/.*decoded *[0-9]* tokens in *[0-9.]* seconds, speed: *\([0-9.]*\) t\/s.*/\1/p' "$tmp/$p.$k.err" | tail -1)
        dr=$(sed -n 's/.*n_drafted = \([0-9]*\).*/\1/p' "$tmp/$p.$k.err")
        ac=$(sed -n 's/.*n_accept  = \([0-9]*\).*/\1/p' "$tmp/$p.$k.err")
        ratio=$(python3 -c "print(f'{float(\"${tps:-0}\")/float(\"${plain:-1}\"):.2f}')" 2>/dev/null || echo -)
        printf '%-8s %5s %9s %7s %9s %9s\n' $p $k "${tps:--}" "$ratio" "${dr:--}" "${ac:--}"
    done
done
