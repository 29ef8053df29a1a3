#!/usr/bin/env bash
# run-main.sh: the main job on the default models, after `make run` has fetched and built.
# Today: answer a question with the evaluation LLM (Qwen2.5-Coder-1.5B) on the CPU engine,
# and print its speed. (The SmallKV pair run joins here when the runtime lands.)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/bin/smallkv
LLM=${LLM:-models/qwen2.5-coder-1.5b.gguf}
PROMPT=${PROMPT:-"Write a C function that returns the n-th Fibonacci number, with a short explanation."}
$BIN info "$LLM"
echo
$BIN generate "$LLM" --chat --prompt "$PROMPT" -n "${N:-200}" --stats
