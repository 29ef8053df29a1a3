#!/usr/bin/env bash
# run-main.sh: the main job on the default model pair, after `make run` fetched and built.
#
# The query-agnostic setting SmallKV is for: the LLM (Qwen2.5-Coder-1.5B) reads a document
# and compresses its KV cache to 20% *before* it sees the question; the SLM (Qwen2.5-Coder-0.5B)
# with the shipped profile guides which tokens the LLM keeps and stands in for the marginal
# ones. The same question is answered with the full cache, with H2O at 20% and with SmallKV at
# 20%, each with its memory by tier and speed.
# The default document is the project's own docs/method.md: it is in every clone, so the job
# needs no data download. Environment: LLM, SLM, PROFILE, CONTEXT (the document), QUESTION,
# BUDGET (0.2), N (tokens to generate, 64), BIN (build/bin/smallkv).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin/smallkv}
LLM=${LLM:-models/qwen2.5-coder-1.5b.gguf}
SLM=${SLM:-models/qwen2.5-coder-0.5b.gguf}
PROFILE=${PROFILE:-profiles/qwen2.5-coder-0.5b-1.5b.skvprof}
CONTEXT=${CONTEXT:-docs/method.md}
BUDGET=${BUDGET:-0.2}
N=${N:-64}
QUESTION=${QUESTION:-"According to the document above, where does SmallKV keep a token that leaves the hot tier, and how can that token come back?"}
[ -f "$CONTEXT" ] || { echo "run-main: context file $CONTEXT not found (set CONTEXT to a text file)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "run-main: $BIN not built (run make)" >&2; exit 1; }
for f in "$LLM" "$SLM" "$PROFILE"; do
  [ -f "$f" ] || { echo "run-main: $f not found (make run fetches the models; LLM, SLM and PROFILE override them)" >&2; exit 1; }
done

$BIN info "$LLM" | head -n 8
for policy in full h2o smallkv; do
  echo
  echo "=== policy $policy$( [ $policy = full ] || echo ", budget $BUDGET" ) ==="
  args=(--llm "$LLM" --policy "$policy" --context "$CONTEXT" --chat --prompt "$QUESTION" -n "$N" --stats)
  [ $policy = full ] || args+=(--budget "$BUDGET")
  [ $policy = smallkv ] && args+=(--slm "$SLM" --profile "$PROFILE")
  $BIN generate "${args[@]}"
done
