#!/usr/bin/env bash
# serve_page.sh: the chat page at GET / in headless Chromium (optional; skips without
# chromium or the model). Starts `smallkv serve` on SmolLM2 (itself as SLM, its profile,
# policy smallkv at 20 %), loads /?q=... (the page asks while it loads), and checks the
# rendered DOM: the question, a non-empty reply, and the memory view with all three tiers
# (LLM hot, LLM cold, SLM). Writes a screenshot to $BUILD/serve-page.png.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
MODEL=${SKV_MODELS_DIR:-models}/SmolLM2-135M-Instruct.Q4_1.gguf
CHROME=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$CHROME" ] || { echo "serve_page: chromium not installed: skipped"; exit 0; }
[ -f "$MODEL" ] || { echo "serve_page: $MODEL missing: skipped"; exit 0; }
out=$(mktemp)
OMP_NUM_THREADS=1 "$BUILD/bin/smallkv" serve --llm "$MODEL" --slm "$MODEL" --profile profiles/smollm2-135m-self.skvprof \
  --port 0 --api-key pk >"$out" 2>/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$out"' EXIT
for _ in $(seq 120); do grep -q listening "$out" && break; sleep 0.5; done
url=$(grep -o 'http://[0-9.]*:[0-9]*' "$out") || { echo "serve_page: FAIL (the server did not start)"; exit 1; }
flags=(--headless --no-sandbox --disable-gpu --window-size=900,520)
dom=$(timeout 120 "$CHROME" "${flags[@]}" --dump-dom "$url/?key=pk&q=Name%20three%20colours." 2>/dev/null)
fail=0
check() { if grep -q "$1" <<<"$dom"; then echo "ok   $2"; else echo "FAIL $2"; fail=1; fi; }
check 'class="user">you: Name three colours.' "the question is shown"
check 'class="assistant">assistant: [^<]' "a reply is shown"
check 'LLM hot tier: [0-9.]* KiB' "hot tier shown"
check 'LLM cold tier: [1-9][0-9.]* KiB' "cold tier shown (non-zero under smallkv)"
check 'SLM cache: [1-9][0-9.]* KiB' "SLM memory shown"
check 'policy smallkv' "the policy is named"
timeout 120 "$CHROME" "${flags[@]}" --screenshot="$BUILD/serve-page.png" "$url/?key=pk&q=Hello" >/dev/null 2>&1
[ -s "$BUILD/serve-page.png" ] && echo "ok   screenshot $BUILD/serve-page.png" || { echo "FAIL screenshot"; fail=1; }
[ $fail -eq 0 ] && echo "serve_page: ok" || echo "serve_page: FAIL"
exit $fail
