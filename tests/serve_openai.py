#!/usr/bin/env python3
"""serve_openai.py: `smallkv serve` through the official `openai` Python client (optional).

Starts build/bin/smallkv serve on SmolLM2 (a free loopback port, an API key) and checks
with the client: model list and retrieve, a chat completion, a streamed one (the same
text), a text completion, the per-request policy through extra_body, session reuse
reported in usage.prompt_tokens_details.cached_tokens, the fields the client sends that
the server implements (top_p, seed, penalties) or ignores (store, metadata, user, the
developer role), replies that decode as UTF-8 when a short reply ends inside a character,
log probabilities (chat, streamed and not, and completions) read as the client's types,
JSON mode (a reply that parses), and that errors arrive as the client's exceptions (BadRequestError for a refused field,
NotFoundError for another model, AuthenticationError). Exits 0 with "skipped" when the
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
    mid = os.path.basename(model)
    check("models.list", [x.id for x in c.models.list().data] == [mid])
    check("models.retrieve", c.models.retrieve(mid).id == mid)
    msgs = [{"role": "user", "content": "Name three colours."}]
    r = c.chat.completions.create(model=mid, messages=msgs, max_tokens=6, temperature=0)
    text = r.choices[0].message.content
    check("chat.completions", r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 6 and len(text) > 0)
    s = c.chat.completions.create(model=mid, messages=msgs, max_tokens=6, temperature=0, stream=True)
    streamed = "".join(ch.choices[0].delta.content or "" for ch in s if ch.choices)
    check("chat.completions stream = same text", streamed == text)
    t = c.completions.create(model=mid, prompt="The capital of France is", max_tokens=4, temperature=0)
    check("completions", "Paris" in t.choices[0].text)
    r2 = c.chat.completions.create(model=mid, messages=msgs + [{"role": "assistant", "content": text},
                                   {"role": "user", "content": "And two more?"}], max_tokens=4, temperature=0)
    check("session reuse (cached_tokens)", r2.usage.prompt_tokens_details.cached_tokens >= r.usage.prompt_tokens)
    r3 = c.chat.completions.create(model=mid, messages=msgs, max_tokens=4, temperature=0,
                                   extra_body={"smallkv": {"policy": "h2o", "budget": 0.5}})
    check("extra_body smallkv policy", r3.model_extra["smallkv"]["policy"] == "h2o")
    r4 = c.chat.completions.create(model=mid, messages=[{"role": "developer", "content": "Be brief."}] + msgs, max_tokens=4,
                                   temperature=0.8, top_p=0.9, seed=5, presence_penalty=0.5, frequency_penalty=0.5,
                                   store=False, metadata={"k": "v"}, user="u-1", logprobs=False)
    r5 = c.chat.completions.create(model=mid, messages=[{"role": "developer", "content": "Be brief."}] + msgs, max_tokens=4,
                                   temperature=0.8, top_p=0.9, seed=5, presence_penalty=0.5, frequency_penalty=0.5)
    check("sampling fields, ignored fields, developer role", r4.choices[0].message.content == r5.choices[0].message.content)
    u = [c.completions.create(model=mid, prompt="日本の首都は", max_tokens=k, temperature=0).choices[0].text for k in (1, 2, 3)]
    check("short CJK replies are whole characters", all("\ufffd" not in t for t in u) and u[2].startswith(u[1]))
    try:
        c.chat.completions.create(model=mid, messages=msgs, max_tokens=0)
        check("max_tokens 0 refused", False)
    except openai.BadRequestError as e:
        check("max_tokens 0 refused", e.status_code == 400 and e.code == "invalid_value")
    lp = c.chat.completions.create(model=mid, messages=msgs, max_tokens=5, temperature=0, logprobs=True, top_logprobs=2)
    ents = lp.choices[0].logprobs.content
    check("chat logprobs (the client's types)", len(ents) == lp.usage.completion_tokens and
          "".join(bytes(e.bytes).decode("utf-8", "replace") for e in ents).startswith(lp.choices[0].message.content) and
          all(len(e.top_logprobs) == 2 and e.top_logprobs[0].token == e.token and e.logprob <= 0 for e in ents))
    sl = c.chat.completions.create(model=mid, messages=msgs, max_tokens=5, temperature=0, logprobs=True, top_logprobs=2, stream=True)
    sents = [e for ch in sl if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    check("chat logprobs streamed = not streamed", [(e.token, e.logprob) for e in sents] == [(e.token, e.logprob) for e in ents])
    tl = c.completions.create(model=mid, prompt="The capital of France is", max_tokens=4, temperature=0, logprobs=3)
    clp = tl.choices[0].logprobs
    check("completions logprobs", "".join(clp.tokens) == tl.choices[0].text and len(clp.top_logprobs[0]) == 3 and
          len(clp.text_offset) == len(clp.token_logprobs) == 4)
    js = c.chat.completions.create(model=mid, messages=[{"role": "user", "content": "A cat as JSON, with name and age."}],
                                   max_tokens=96, temperature=0.7, seed=3, response_format={"type": "json_object"})
    import json
    check("json mode: the reply is a JSON object", js.choices[0].finish_reason == "length" or
          isinstance(json.loads(js.choices[0].message.content), dict))
    try:
        c.chat.completions.create(model=mid, messages=msgs, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {}}})
        check("json_schema refused", False)
    except openai.BadRequestError as e:
        check("json_schema refused", e.status_code == 400 and e.param == "response_format")
    try:
        c.chat.completions.create(model="gpt-4o", messages=msgs)
        check("another model: 404", False)
    except openai.NotFoundError as e:
        check("another model: 404", e.code == "model_not_found")
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
