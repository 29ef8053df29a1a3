#!/usr/bin/env bash
# spec-batch.sh: the three speculative-decoding prompts (HumanEval/0, /10 and GSM8K test #0,
# scripts/spec-prompts.py) generated one by one and all together (smallkv_generate_batch,
# bench/bench_spec_batch.c), plain and with the SLM drafting, for the full cache and SmallKV
# at 20 %, on the Qwen2.5-Coder pair; 64 greedy tokens each, completions. Every row checks that
# each sequence printed the same tokens both ways. docs/performance.md, "Several sequences
# together". Environment: OMP_NUM_THREADS (default 2), SPEC_N (64).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
N=${SPEC_N:-64}
B=build/bin/bench_spec_batch
Q=(--llm models/qwen2.5-coder-1.5b.gguf --slm models/qwen2.5-coder-0.5b.gguf)
P=profiles/qwen2.5-coder-0.5b-1.5b.skvprof
for f in ${Q[1]} ${Q[3]} $P $B; do [ -e "$f" ] || { echo "spec-batch: $f missing" >&2; exit 2; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 scripts/spec-prompts.py "$tmp"
echo "# spec-batch: commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!results' 2>/dev/null || echo -dirty), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, OMP_NUM_THREADS=$OMP_NUM_THREADS, $N tokens a sequence"
$B "${Q[@]}" --policy full --drafts "0 1 2 3" -n "$N" "$tmp"/he0.txt "$tmp"/he10.txt "$tmp"/gsm0.txt
$B "${Q[@]}" --profile $P --policy smallkv --budget 0.2 --drafts "0 2 3" -n "$N" "$tmp"/he0.txt "$tmp"/he10.txt "$tmp"/gsm0.txt | tail -n +3
