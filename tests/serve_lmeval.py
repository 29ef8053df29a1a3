#!/usr/bin/env python3
"""serve_lmeval.py: `smallkv serve` under a client nobody here wrote: EleutherAI's
lm-evaluation-harness (optional), its OpenAI-compatible backends `local-chat-completions`
(the harness's chat template path) and `local-completions` (plain prompts), running a few
GSM8K items from the local files `make data` fetches (data/gsm8k/{train,test}.jsonl, read by
a task config this script writes: the harness's own gsm8k task with the local files as its
dataset; no network). Checks that each backend finishes, reports GSM8K's exact_match for
both filters, logs one response per item, that the server honoured the task's stop string
("Question:" never appears in a response) and that the replies are not empty. Accuracy is
not checked: SmolLM2-135M is too small to solve GSM8K.
Exits 0 with "skipped" when lm_eval, the model or the data is missing; 1 on a failure.
Run: python3 tests/serve_lmeval.py  (BUILD, SKV_MODELS_DIR, SKV_DATA_DIR as for the C tests;
SERVE_LMEVAL_LIMIT items per backend, default 3)."""
import os, re, subprocess, sys, tempfile

try:
    import lm_eval
    from lm_eval.tasks import TaskManager
except ImportError:
    print("serve_lmeval: lm_eval (lm-evaluation-harness) is not installed: skipped"); sys.exit(0)
build = os.environ.get("BUILD") or "build"
model = os.path.join(os.environ.get("SKV_MODELS_DIR") or "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
data = os.path.abspath(os.path.join(os.environ.get("SKV_DATA_DIR") or "data", "gsm8k"))
limit = int(os.environ.get("SERVE_LMEVAL_LIMIT") or 3)
for path in (model, os.path.join(data, "test.jsonl"), os.path.join(data, "train.jsonl")):
    if not os.path.exists(path):
        print(f"serve_lmeval: {path} missing: skipped"); sys.exit(0)

# the harness's gsm8k task (lm_eval/tasks/gsm8k/gsm8k.yaml) on the local files
TASK = f"""task: gsm8k_local
dataset_path: json
dataset_kwargs:
  data_files:
    train: {data}/train.jsonl
    test: {data}/test.jsonl
output_type: generate_until
training_split: train
fewshot_split: train
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore: [",", "\\\\$", "(?s).*#### ", "\\\\.$"]
generation_kwargs:
  until: ["Question:", "</s>", "<|im_end|>"]
  do_sample: false
  temperature: 0.0
  max_gen_toks: 48
num_fewshot: 2
filter_list:
  - name: strict-match
    filter:
      - function: regex
        regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"
      - function: take_first
  - name: flexible-extract
    filter:
      - function: regex
        group_select: -1
        regex_pattern: "(-?[$0-9.,]{{2,}})|(-?[0-9]+)"
      - function: take_first
metadata:
  version: 3.0
"""

KEY = "sk-lmeval-test"
tmp = tempfile.mkdtemp(prefix="serve_lmeval.")
with open(os.path.join(tmp, "gsm8k_local.yaml"), "w") as f:
    f.write(TASK)
os.environ.update(OPENAI_API_KEY=KEY, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
                  HF_DATASETS_CACHE=os.path.join(tmp, "hf"), TOKENIZERS_PARALLELISM="false")
srv = subprocess.Popen([f"{build}/bin/smallkv", "serve", "--llm", model, "--port", "0", "--api-key", KEY,
                        "--ctx", "2048"], stdout=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="2"))
m = re.search(r"http://[\d.]+:\d+", srv.stdout.readline())
failures = 0

def check(name, cond):
    global failures
    print(("ok   " if cond else "FAIL ") + name, flush=True)
    failures += not cond

try:
    assert m, "the server did not start"
    tm = TaskManager(include_path=tmp, include_defaults=False)
    mid = os.path.basename(model)
    for backend, path, chat in (("local-chat-completions", "/v1/chat/completions", True),
                                ("local-completions", "/v1/completions", False)):
        args = {"model": mid, "base_url": m.group(0) + path, "num_concurrent": 1, "max_retries": 1,
                "tokenizer_backend": None, "tokenized_requests": False, "timeout": 300}
        out = lm_eval.simple_evaluate(model=backend, model_args=args, tasks=["gsm8k_local"], limit=limit,
                                      apply_chat_template=chat, task_manager=tm, log_samples=True,
                                      bootstrap_iters=0, random_seed=0)
        res = out["results"]["gsm8k_local"] if out else {}
        samples = out["samples"]["gsm8k_local"] if out else []
        replies = [s["resps"][0][0] for s in samples if s["filter"] == "strict-match"]   # one per item and filter
        check(f"{backend}: exact_match for both filters",
              "exact_match,strict-match" in res and "exact_match,flexible-extract" in res)
        check(f"{backend}: {limit} GSM8K items answered",
              len(replies) == limit and len({s["doc_id"] for s in samples}) == limit)
        check(f"{backend}: replies not empty", all(isinstance(r, str) and r.strip() for r in replies))
        check(f"{backend}: the stop string was applied", not any("Question:" in r for r in replies))
        print(f"  {backend}: exact_match {res.get('exact_match,flexible-extract')} (flexible); first reply: "
              f"{replies[0][:80]!r}" if replies else "", flush=True)
except Exception as e:   # the harness's or the server's failure, reported as one
    check(f"no exception ({type(e).__name__}: {e})", False)
finally:
    srv.terminate()
    check("server exits cleanly on SIGTERM", srv.wait(timeout=30) == 0)
print("serve_lmeval: " + ("all passed" if not failures else f"{failures} failed"))
sys.exit(1 if failures else 0)
