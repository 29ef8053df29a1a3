#!/usr/bin/env bash
# llamacpp-prefill.sh: prefill (time to first token) against llama.cpp on the same GGUF files,
# back to back in one run: for each model and prompt length, build/bin/bench_prefill, then
# llama.cpp's llama-bench -p N -n 0, then bench_prefill again (so a change in the machine's
# load shows as two different figures of ours), for docs/performance.md. llama.cpp is not part
# of smallkv: build llama-bench yourself from a source tree you fetch (e.g. the
# llama-cpp-python sdist on PyPI vendors one under vendor/llama.cpp):
#   cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON
#   cmake --build build -j2 --target llama-bench
# (on a CPU with AMX and GCC 12, llama.cpp's AMX path dies with SIGILL: GCC drops the stores to
# the local tile configuration in ggml-cpu/amx/mmq.cpp's ggml_tile_config_init; an empty asm
# with a "memory" clobber before its _tile_loadconfig fixes it: docs/performance.md)
# then: LLAMA_BIN=/path/to/llama.cpp/build/bin scripts/llamacpp-prefill.sh
# Environment: LLAMA_BIN (required), PREFILL_THREADS (default: OMP_NUM_THREADS or 2),
# PREFILL_TOKENS ("512 4096"), PREFILL_MODELS (the Qwen pair), PREFILL_REPS (2), PREFILL_ATTN
# (our prefill attention: exact, the default, or bf16, the opt-in AMX-BF16 kernel).
# Prints a markdown table: tokens/s of ours (both runs), llama.cpp's, and ours / llama.cpp's
# (the better of ours).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
: "${LLAMA_BIN:?set LLAMA_BIN to a llama.cpp build/bin folder}"
T=${PREFILL_THREADS:-${OMP_NUM_THREADS:-2}}
LENS=${PREFILL_TOKENS:-"512 4096"}
MODELS=${PREFILL_MODELS:-"models/qwen2.5-coder-0.5b.gguf models/qwen2.5-coder-1.5b.gguf"}
R=${PREFILL_REPS:-2}
ATTN=${PREFILL_ATTN:-exact}
OURS=build/bin/bench_prefill
for f in $MODELS "$LLAMA_BIN/llama-bench" $OURS; do
    [ -e "$f" ] || { echo "llamacpp-prefill: $f missing (models: make models; ours: make)" >&2; exit 2; }
done
ours() {   # model tokens -> tok/s
    "$OURS" "$1" --tokens "$2" --threads $T --reps $R --attn "$ATTN" | awk -F'|' 'NR > 2 { gsub(/ /, "", $8); print $8 }'
}
theirs() {   # model tokens -> tok/s (llama-bench's csv: avg_ts is the next-to-last field)
    "$LLAMA_BIN/llama-bench" -m "$1" -t $T -p "$2" -n 0 -r $R -o csv 2>/dev/null | tail -1 |
        awk -F, '{ gsub(/"/, "", $0); print $(NF-1) }'
}
echo "llamacpp-prefill: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $T threads, our attention $ATTN," \
     "$(git rev-parse --short HEAD), llama.cpp $(cd "$LLAMA_BIN" && git rev-parse --short HEAD 2>/dev/null || echo '(no git)')"
echo
echo "| model | tokens | ours tok/s (run 1, run 2) | llama.cpp tok/s | ours / llama.cpp |"
echo "|---|---:|---:|---:|---:|"
for m in $MODELS; do
    for n in $LENS; do
        a=$(ours "$m" "$n"); b=$(theirs "$m" "$n"); c=$(ours "$m" "$n")
        python3 -c "import sys; a, b, c = map(float, sys.argv[3:6]); print(f'| {sys.argv[1]} | {sys.argv[2]} | {a:.1f}, {c:.1f} | {b:.1f} | {max(a, c) / b:.2f}x |')" \
            "$(basename "$m" .gguf)" "$n" "$a" "$b" "$c"
    done
done
