#!/usr/bin/env python3
"""serve_openai.py: `smallkv serve` through the official `openai` Python client (optional).

Starts build/bin/smallkv serve on SmolLM2 (a free loopback port, an API key) and checks
with the client: model list, a chat completion, a streamed one (the same text), a text
completion, the per-request policy through extra_body, session reuse reported in
usage.prompt_tokens_details.cached_tokens, and that errors arrive as the client's
exceptions (BadRequestError, AuthenticationError). Exits 0 with "skipped" when the
package or the model is missing; 1 on a failure.
Run: python3 tests/serve_openai.py  (BUILD, SKV_MODELS_DIR as for the C tests)."""
import os, re, subprocess, sys

try:
    import openai
except ImportError:
    print("serve_openai: the openai package is not installed: skipped"); sys.exit(0)
build = os.environ.get("BUILD") or "build"
model = os.path.join(os.environ.get("SKV_MODELS_DIR") or "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
if not os.path.exists(model):
    print(f"serve_openai: {model} missing: skipped"); sys.exit(0)

KEY = "sk-openai-test"
srv = subprocess.Popen([f"{build}/bin/smallkv", "serve", "--llm", model, "--port", "0", "--api-key", KEY,
                        "--max-tokens", "8", "--ctx", "512"], stdout=subprocess.PIPE, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
m = re.search(r"http://[\d.]+:\d+", srv.stdout.readline())
failures = 0

def check(name, cond):
    global failures
    print(("ok   " if cond else "FAIL ") + name)
    failures += not cond

try:
    assert m, "the server did not start"
    c = openai.OpenAI(base_url=m.group(0) + "/v1", api_key=KEY)
    check("models.list", [x.id for x in c.models.list().data] == [os.path.basename(model)])
    msgs = [{"role": "user", "content": "Name three colours."}]
    r = c.chat.completions.create(model="smol", messages=msgs, max_tokens=6, temperature=0)
    text = r.choices[0].message.content
    check("chat.completions", r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 6 and len(text) > 0)
    s = c.chat.completions.create(model="smol", messages=msgs, max_tokens=6, temperature=0, stream=True)
    streamed = "".join(ch.choices[0].delta.content or "" for ch in s if ch.choices)
    check("chat.completions stream = same text", streamed == text)
    t = c.completions.create(model="smol", prompt="The capital of France is", max_tokens=4, temperature=0)
    check("completions", "Paris" in t.choices[0].text)
    r2 = c.chat.completions.create(model="smol", messages=msgs + [{"role": "assistant", "content": text},
                                   {"role": "user", "content": "And two more?"}], max_tokens=4, temperature=0)
    check("session reuse (cached_tokens)", r2.usage.prompt_tokens_details.cached_tokens >= r.usage.prompt_tokens)
    r3 = c.chat.completions.create(model="smol", messages=msgs, max_tokens=4, temperature=0,
                                   extra_body={"smallkv": {"policy": "h2o", "budget": 0.5}})
    check("extra_body smallkv policy", r3.model_extra["smallkv"]["policy"] == "h2o")
    try:
        c.chat.completions.create(model="smol", messages=msgs, max_tokens=0)
        check("max_tokens 0 refused", False)
    except openai.BadRequestError as e:
        check("max_tokens 0 refused", e.status_code == 400 and e.code == "invalid_value")
    try:
        openai.OpenAI(base_url=m.group(0) + "/v1", api_key="wrong", max_retries=0).models.list()
        check("wrong key refused", False)
    except openai.AuthenticationError:
        check("wrong key refused", True)
except Exception as e:
    check(f"unexpected {type(e).__name__}: {e}", False)
finally:
    srv.terminate()
    check("server exits cleanly", srv.wait(timeout=60) == 0)
print("serve_openai:", "FAIL" if failures else "ok")
sys.exit(1 if failures else 0)
