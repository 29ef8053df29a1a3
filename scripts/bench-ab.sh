#!/usr/bin/env bash
# bench-ab.sh [BASE]: decode speed of the working tree against revision BASE (default HEAD),
# as a ratio measured in one process (bench/bench_pair.c: both builds loaded side by side,
# decoding in alternating windows), for each model in models/ at 512 and 2048 tokens of
# context. The two builds are shared libraries compiled here from each tree's library sources
# (its Makefile's `make print-lib-src`; trees older than that target: runtime/*.c and
# kernels/cpu/*.c) with the Makefile's optimisation flags (no CUDA).
# Environment: OMP_NUM_THREADS (default 2), AB_WINDOWS (30), AB_STEPS (10 per window).
set -euo pipefail
base=${1:-HEAD}
root=$(git rev-parse --show-toplevel)
cd "$root"
git rev-parse --verify -q "$base^{commit}" >/dev/null || { echo "bench-ab: no revision '$base'" >&2; exit 2; }
models=()
for m in models/SmolLM2-135M-Instruct.Q4_1.gguf models/qwen2.5-coder-0.5b.gguf models/qwen2.5-coder-1.5b.gguf; do
    [ -f "$m" ] && models+=("$m")
done
[ ${#models[@]} -gt 0 ] || { echo "bench-ab: no models in models/ (make models)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/base"
git archive "$base" | tar -x -C "$tmp/base"
flags=(-std=c11 -D_GNU_SOURCE -O2 -fopenmp -mavx2 -mfma -mf16c -fPIC -fno-semantic-interposition -shared
       $(pkg-config --cflags libcjson 2>/dev/null))
lib_src() { # lib_src TREE: the tree's library sources, as paths under TREE
    local src
    if src=$(make -s -C "$1" print-lib-src 2>/dev/null) && [ -n "$src" ]; then
        for f in $src; do echo "$1/$f"; done
    else
        ls "$1"/runtime/*.c "$1"/kernels/cpu/*.c
    fi
}
build_so() { cc "${flags[@]}" -I"$1" $(lib_src "$1") -o "$2" -lzstd -lcjson -lm; }
echo "bench-ab: building $base and the working tree as shared libraries ..." >&2
build_so "$tmp/base" "$tmp/libA.so" &
pid=$!
build_so "$root" "$tmp/libB.so"
wait "$pid"
cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -I"$root" "$root/bench/bench_pair.c" -o "$tmp/bench_pair" -ldl
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
echo "decode ms/step, $OMP_NUM_THREADS threads, fp16 KV cache; A = $base ($(git rev-parse --short "$base")), B = working tree"
echo
echo "| model | context | A ms/step | B ms/step | B/A |"
echo "|---|---:|---:|---:|---:|"
for m in "${models[@]}"; do
    for ctx in 512 2048; do
        "$tmp/bench_pair" "$tmp/libA.so" "$tmp/libB.so" "$m" --ctx "$ctx" \
            --windows "${AB_WINDOWS:-30}" --steps "${AB_STEPS:-10}"
    done
done
