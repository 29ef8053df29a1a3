#!/usr/bin/env bash
# run-main.sh: the main job on the default model pair, after `make run` fetched and built.
#
# The query-agnostic setting SmallKV is for: the LLM (Qwen2.5-Coder-1.5B) reads a document
# and compresses its KV cache to 20% *before* it sees the question; the SLM (Qwen2.5-Coder-0.5B)
# with the shipped profile guides which tokens the LLM keeps and stands in for the marginal
# ones. The same question is answered with the full cache, with H2O at 20% and with SmallKV at
# 20%, each with its memory and speed statistics.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin/smallkv
DATA=${SKV_DATA:-../shared/data}
LLM=${LLM:-models/qwen2.5-coder-1.5b.gguf}
SLM=${SLM:-models/qwen2.5-coder-0.5b.gguf}
PROFILE=${PROFILE:-profiles/qwen2.5-coder-0.5b-1.5b.skvprof}
CONTEXT=${CONTEXT:-$DATA/pg-essays/founders.txt}
BUDGET=${BUDGET:-0.2}
N=${N:-64}
QUESTION=${QUESTION:-"According to the essay above, what is the most important quality in startup founders, and why?"}
[ -f "$CONTEXT" ] || { echo "run-main: context file $CONTEXT not found (set SKV_DATA or CONTEXT)" >&2; exit 1; }

$BIN info "$LLM" | head -n 8
for policy in full h2o smallkv; do
  echo
  echo "=== policy $policy$( [ $policy = full ] || echo ", budget $BUDGET" ) ==="
  args=(--llm "$LLM" --policy "$policy" --context "$CONTEXT" --chat --prompt "$QUESTION" -n "$N" --stats)
  [ $policy = full ] || args+=(--budget "$BUDGET")
  [ $policy = smallkv ] && args+=(--slm "$SLM" --profile "$PROFILE")
  $BIN generate "${args[@]}"
done
