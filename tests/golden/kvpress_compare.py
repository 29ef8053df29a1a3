#!/usr/bin/env python3
"""kvpress_compare.py: NVIDIA's kvpress (PyPI) as a peer check of our SnapKV and StreamingLLM.

Both sides compress the same prompt token ids once after an exact prefill, at the same budget
in tokens. kvpress then keeps every later token (it compresses prefills only), so does our
SnapKV (decode=keep, the default); our StreamingLLM holds its budget while decoding, so its
fidelity is also compared in kvpress's terms (streamingllm-keep below). Compared per case:
  - kept sets: per (layer, KV head) Jaccard of the kept prompt positions; also over the
    positions outside both observation windows (where the scores, not the forced window,
    decide), and how many lanes are identical;
  - passkey (5 cases: 1024 tokens, key at depth 0/25/50/75/100 %, `smallkv eval passkey`'s
    construction and question): the greedy answers of both, and whether each found the key;
  - fidelity (one wikitext-2 document, `smallkv eval fidelity`'s first document, N tokens,
    prefill P): mean KL(full || compressed) over the N-1-P teacher-forced next-token
    distributions, ours from the eval record, kvpress's from transformers.
Configurations (ours <-> kvpress):
  streamingllm      streamingllm (sinks=4)                      StreamingLLMPress(n_sink=4)
  snapkv-default    snapkv (window 32, max-pool 7, 4 sinks,     SnapKVPress() (window 64,
                    group sum)                                  avg-pool 5, no sinks, group mean)
  snapkv-matched    snapkv:window=32:pool=1:sinks=0:reduce=mean SnapKVPress(window_size=32,
                                                                kernel_size=1)
  streamingllm-keep snapkv:window=B-4 (fidelity only: 4 sinks   StreamingLLMPress(n_sink=4)
                    + the last B-4 tokens, then every token kept)
  ladder            our snapkv against kvpress's SnapKV moved to our settings step by step
                    (window 32, then max-pool 7, then 4 sinks; kept sets only), positions
                    that still differ checked for ties at the top-k boundary
The budget is ours, floor(0.2 * n) tokens per lane; kvpress gets the compression ratio that keeps
exactly as many (1 - (B + 0.5) / n). What compression_ratio=0.8 itself would keep is reported
too: int(n * (1 - 0.8)) is floor(0.2 n) - 1 for every n >= 10 that is a multiple of 5 (1 - 0.8
is 0.19999999999999996 in doubles); at n = 1024 and 512 the two agree.

Our side runs `smallkv eval passkey` and `smallkv eval fidelity` (policies full + the three
above; fidelity again with full + snapkv:window=B-4; --kv f32, one thread) with SKV_DUMP_KEPT set: the session appends each prefill's token
ids and each compression's kept positions per lane (runtime/session/session.h), so kvpress is
fed the very same ids. kvpress side: the model from the same GGUF through transformers (every
tensor dequantised to fp32), CPU, sdpa attention. Each case is prefilled once with forward hooks
on the attention layers that do what kvpress's BasePress.forward_hook does, except that every
press scores the same layer inputs (press.score + the top-k of ScorerPress.compress) and the
cache is left full; each press's compressed cache is then the full one gathered at its indices,
exactly as forward_hook writes it. That this equals kvpress's own `with press(model):` path is
checked on the fidelity document (kept indices and compressed keys, every press).

KVzip (--kvzip: only this comparison; kvzip_main below): our kvzip against kvpress's own
KVzipPress code (its context-reconstruction pass, _perform_kvzip_compression, run on the same
prefilled cache), on the fidelity document at the same budget in pairs:
  kvzip             kvzip (level=global, 4 sinks, chunk 2048)   KVzipPress(n_sink=4) with its
                                                                 prefix_length set to 4
  kvzip-layer       kvzip:level=layer                           KVzipPress(layerwise=True)
  kvzip-chunk128    kvzip:chunk=128 (context scored in chunks)  KVzipPress(chunk_size=128)
prefix_length is what kvpress neither scores nor lets be sinks of the scoring softmax (its chat
template's prefix): 4 makes the never-evicted part the same 4 positions as our sinks. Kept sets
(Jaccard per lane; lanes keep different counts, so the counts are compared too) and fidelity KL
(kvpress: its own masking of the evicted keys, kvpress.attention_patch) are reported.

Run (1.5B, one CPU thread each: about 13 min for our three eval runs, 13 for kvpress's side;
models/ as for the tests):
  python3 -m venv /work/pyenv && /work/pyenv/bin/pip install kvpress transformers torch gguf numpy
  make -j2
  OMP_NUM_THREADS=1 nice -n 19 /work/pyenv/bin/python tests/golden/kvpress_compare.py \\
      [--gguf qwen2.5-coder-1.5b.gguf] [--work /tmp/kvpress_cmp] [--json out.json]
Our outputs are kept in --work and reused when present (delete them to rerun ours).
CI never runs it.
"""
import argparse, copy, json, math, os, re, subprocess, time
from dataclasses import dataclass
from importlib.metadata import version

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
from transformers.utils import logging as hf_logging
from kvpress import KVzipPress, SnapKVPress, StreamingLLMPress
from kvpress.utils import compute_n_kept, extract_keys_and_values

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
PK_QUESTION = "\n\nWhat is the pass key? The pass key is"   # eval/data.c
BUDGET = 0.2
OURS_POLICIES = ["full", "streamingllm", "snapkv", "snapkv:window=32:pool=1:sinks=0:reduce=mean"]
# name -> (predicate on our dump's policy label, kvpress press factory given compression_ratio, window)
CONFIGS = {
    "streamingllm": (lambda lab: lab.startswith("streamingllm"),
                     lambda cr: StreamingLLMPress(compression_ratio=cr, n_sink=4), (0, 0)),
    "snapkv-default": (lambda lab: lab.startswith("snapkv") and "pool=" not in lab,
                       lambda cr: SnapKVPress(compression_ratio=cr), (32, 64)),
    "snapkv-matched": (lambda lab: lab.startswith("snapkv") and "pool=1" in lab and "sinks=0" in lab,
                       lambda cr: SnapKVPress(compression_ratio=cr, window_size=32, kernel_size=1), (32, 32)),
}


@dataclass
class OurPoolSnapKVPress(SnapKVPress):
    """kvpress's SnapKV scored our way: the window's mean attention averaged over the group
    first, then max-pooled (kernel k, padding k // 2: F.max_pool1d pads with -inf, as our
    skv_maxpool1d clips), and the first n_sink positions always kept. Not a kvpress press:
    it exists to show which of the differences accounts for how much."""
    pool: str = "max"
    n_sink: int = 0

    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        bsz, hkv, k_len, _ = keys.shape
        g = module.config.num_attention_heads // hkv
        if attentions is not None:
            attn = attentions[..., -self.window_size:, :-self.window_size]
        else:
            attn = self.compute_window_attention(module, hidden_states, keys, self.window_size,
                                                 kwargs["position_embeddings"])
        scores = attn.mean(dim=-2).view(bsz, hkv, g, k_len - self.window_size).mean(2)
        if self.pool == "max":
            scores = F.max_pool1d(scores, kernel_size=self.kernel_size, padding=self.kernel_size // 2, stride=1)
        else:
            scores = F.avg_pool1d(scores, kernel_size=self.kernel_size, padding=self.kernel_size // 2, stride=1)
        top = scores.max().item()
        scores = F.pad(scores, (0, self.window_size), value=top + 1)
        scores[..., :self.n_sink] = top + 2
        return scores


# Steps from kvpress's defaults to ours, each compared with our default snapkv's kept sets
# (kept sets only): which setting accounts for how much of the difference.
LADDER = [
    ("kvpress default: window 64, avg-pool 5", lambda cr: SnapKVPress(compression_ratio=cr), 64),
    ("window 32, avg-pool 5", lambda cr: SnapKVPress(compression_ratio=cr, window_size=32), 32),
    ("window 32, max-pool 7 (group mean first)",
     lambda cr: OurPoolSnapKVPress(compression_ratio=cr, window_size=32, kernel_size=7), 32),
    ("window 32, max-pool 7, 4 sinks (= ours)",
     lambda cr: OurPoolSnapKVPress(compression_ratio=cr, window_size=32, kernel_size=7, n_sink=4), 32),
]


# ------------------------------------------------------------------ our side

def run_ours(args):
    os.makedirs(args.work, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    common = ["--llm", os.path.join(args.models, args.gguf),
              "--budgets", str(BUDGET), "--kv", "f32", "--threads", "1", "--data", args.data]
    ours = ["--policies", ",".join(OURS_POLICIES)]
    fid = ["fidelity", "--corpora", "wikitext2", "--tokens", str(args.tokens), "--prefill", str(args.prefill),
           "--limit", "1"]
    jobs = {
        "passkey": ["passkey", "--lengths", "1024", "--depths", "0,25,50,75,100"] + ours,
        "fidelity": fid + ours,
        # our streamingllm holds its budget while decoding, kvpress's compresses the prefill
        # only; SnapKV whose window is all of the budget but the 4 sinks keeps exactly
        # StreamingLLM's set and, with decode=keep, every later token: kvpress's semantics
        "fidelity_keep": fid + ["--policies", "full,snapkv:window=%d" % (budget_tokens(args.prefill) - 4)],
    }
    for name, task in jobs.items():
        kept, rec = os.path.join(args.work, name + ".kept"), os.path.join(args.work, name + ".json")
        if os.path.exists(kept) and os.path.exists(rec):
            continue
        for p in (kept, rec):
            if os.path.exists(p):
                os.remove(p)
        cmd = ["nice", "-n", "19", args.smallkv, "eval"] + task + common + ["-o", rec]
        print("ours:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, env=dict(env, SKV_DUMP_KEPT=kept))


def parse_dump(path):
    """-> list of units: {"tokens": [...], "blocks": [{"label", "n", "budget", "kept": {(l, h): [pos]}}]}"""
    units = []
    cur = None
    with open(path) as f:
        for line in f:
            if line.startswith("# tokens "):
                m = re.match(r"# tokens from=(\d+)((?: \d+)*)", line)
                assert m and m.group(1) == "0", "a dump unit must start with a prefill from position 0"
                units.append({"tokens": [int(x) for x in m.group(2).split()], "blocks": []})
            elif line.startswith("# kept "):
                kv = dict(x.split("=", 1) for x in line[len("# kept "):].split())
                cur = {"label": kv["policy"], "n": int(kv["n"]), "budget": float(kv["budget"]), "kept": {}}
                units[-1]["blocks"].append(cur)
            else:
                parts = line.split("|")[0].split()
                cur["kept"][(int(parts[0]), int(parts[1]))] = [int(x) for x in parts[2:]]
    return units


def records(path):
    with open(path) as f:
        data = json.load(f)
    return data["records"] if isinstance(data, dict) and "records" in data else data


def first_digits(text):
    m = re.search(r"\d+", text)
    return m.group(0) if m else ""


# ------------------------------------------------------------------ kvpress side

class Scorer:
    """Forward hooks that score one prefill for several presses at once (kvpress's
    BasePress.forward_hook + ScorerPress.compress, minus the write-back)."""

    def __init__(self, model, presses):
        self.model, self.presses, self.idx, self.scores, self.hooks = model, presses, {}, {}, []

    def hook(self, module, inp, kwargs, output):
        hidden = kwargs["hidden_states"]
        cache = kwargs["past_key_values"]
        keys, values = extract_keys_and_values(cache, module.layer_idx)
        for name, press in self.presses.items():
            scores = press.score(module, hidden, keys, values, output[1], kwargs)
            n_kept = compute_n_kept(keys.shape[2], press.compression_ratio)
            self.idx.setdefault(name, {})[module.layer_idx] = scores.topk(n_kept, dim=-1).indices
            self.scores.setdefault(name, {})[module.layer_idx] = scores.float()
        return output

    def __enter__(self):
        for p in self.presses.values():
            p.post_init_from_model(self.model)
        for layer in self.model.model.layers:
            self.hooks.append(layer.self_attn.register_forward_hook(self.hook, with_kwargs=True))
        return self

    def __exit__(self, *a):
        for h in self.hooks:
            h.remove()


def gathered_cache(full, idx, head_dim):
    c = copy.deepcopy(full)
    for l, ind in idx.items():
        e = ind.unsqueeze(-1).expand(-1, -1, -1, head_dim)
        c.layers[l].keys = c.layers[l].keys.gather(2, e).contiguous()
        c.layers[l].values = c.layers[l].values.gather(2, e).contiguous()
    return c


def prefill(model, ids, presses):
    cache = DynamicCache()
    with Scorer(model, presses) as sc, torch.no_grad():
        model.model(input_ids=torch.tensor([ids]), past_key_values=cache)
    return cache, (sc.idx, sc.scores)


def greedy(model, tok, cache, ctx_len, q_ids, max_new):
    """kvpress's KVPressTextGenerationPipeline.generate_answer (positions continue the
    uncompressed context), stopping like ours at the first non-digit after a number."""
    pos = torch.arange(ctx_len, ctx_len + len(q_ids)).unsqueeze(0)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([q_ids]), past_key_values=cache, position_ids=pos, logits_to_keep=1)
        gen = [int(out.logits[0, -1].argmax())]
        p = ctx_len + len(q_ids)
        for _ in range(max_new - 1):
            text = tok.decode(gen)
            if re.search(r"\d+\D", text) or gen[-1] == tok.eos_token_id:
                break
            out = model(input_ids=torch.tensor([[gen[-1]]]), past_key_values=cache, position_ids=torch.tensor([[p]]))
            gen.append(int(out.logits[0, -1].argmax()))
            p += 1
    return tok.decode(gen)


def block_logprobs(model, cache, ids, start):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), past_key_values=cache,
                    position_ids=torch.arange(start, start + len(ids)).unsqueeze(0))
    return torch.log_softmax(out.logits[0].double(), dim=-1)


# ------------------------------------------------------------------ comparison

def jaccard(a, b):
    a, b = set(a), set(b)
    return len(a & b) / len(a | b) if a | b else 1.0


def compare_kept(ours, theirs, n, windows):
    """ours: {(l, h): [pos]}; theirs: ({l: indices (1, Hkv, k)}, {l: scores (1, Hkv, n)}) -> summary.
    Each position kept by one side only is measured by kvpress's score there against kvpress's
    k-th largest score in the lane (the boundary): gap 0 = a tie that top-k broke another way."""
    theirs_idx, theirs_sc = theirs
    cut = n - max(windows) if max(windows) else n
    js, jpre, same, per_layer, gaps = [], [], 0, {}, []
    for (l, h), pos in sorted(ours.items()):
        th = sorted(theirs_idx[l][0, h].tolist())
        sc = theirs_sc[l][0, h]
        thr = sc[theirs_idx[l][0, h]].min().item()
        gaps += [abs(sc[p].item() - thr) / max(abs(thr), 1e-30) for p in set(pos) ^ set(th)]
        j = jaccard(pos, th)
        js.append(j)
        jpre.append(jaccard([p for p in pos if p < cut], [p for p in th if p < cut]))
        same += pos == th
        per_layer.setdefault(l, []).append(j)
    return {"jaccard_mean": sum(js) / len(js), "jaccard_min": min(js),
            "jaccard_scored_mean": sum(jpre) / len(jpre), "lanes_identical": same, "lanes": len(js),
            "kept_ours": len(next(iter(ours.values()))), "kept_kvpress": int(theirs_idx[0].shape[-1]),
            "positions_differing": len(gaps), "differing_at_tie": sum(g == 0 for g in gaps),
            "differing_gap_median": sorted(gaps)[len(gaps) // 2] if gaps else 0.0,
            "jaccard_per_layer": [round(sum(v) / len(v), 4) for _, v in sorted(per_layer.items())]}


def ladder(blocks, idx, n):
    ours = next(b for b in blocks if CONFIGS["snapkv-default"][0](b["label"]))["kept"]
    res = {}
    for name, _, w in LADDER:
        c = compare_kept(ours, (idx[0]["ladder:" + name], idx[1]["ladder:" + name]), n, (32, w))
        res[name] = {k: c[k] for k in ("jaccard_mean", "jaccard_min", "jaccard_scored_mean", "lanes_identical", "lanes",
                                       "positions_differing", "differing_at_tie", "differing_gap_median")}
    return res


def print_ladder(lad):
    for name, c in lad.items():
        print(f"    ours snapkv vs {name:42s} J={c['jaccard_mean']:.3f} (scored part {c['jaccard_scored_mean']:.3f}, "
              f"identical lanes {c['lanes_identical']}/{c['lanes']}; {c['positions_differing']} positions differ, "
              f"{c['differing_at_tie']} at a tie, median gap {c['differing_gap_median']:.2g})", flush=True)


def budget_tokens(n):
    return max(1, min(n, math.floor(BUDGET * n + 1e-9)))   # skv_budget_tokens


def make_presses(n, B, ladder=False):
    cr = 1 - (B + 0.5) / n
    presses = {name: cfg[1](cr) for name, cfg in CONFIGS.items()}
    if ladder:
        presses.update({"ladder:" + name: f(cr) for name, f, _ in LADDER})
    for p in presses.values():
        assert compute_n_kept(n, p.compression_ratio) == B
    return presses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.environ.get("SKV_MODELS_DIR", os.path.join(ROOT, "models")))
    ap.add_argument("--gguf", default="qwen2.5-coder-1.5b.gguf")
    ap.add_argument("--smallkv", default=os.path.join(ROOT, "build", "bin", "smallkv"))
    ap.add_argument("--data", default=os.environ.get("SKV_DATA_DIR", "data"))
    ap.add_argument("--work", default="/tmp/kvpress_cmp")
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--json", help="write every number here as JSON")
    ap.add_argument("--kvzip", action="store_true", help="only the KVzip comparison (kvzip_main)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    hf_logging.disable_progress_bar()
    torch.manual_seed(0)
    if args.kvzip:
        return kvzip_main(args)
    run_ours(args)

    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(args.models, gguf_file=args.gguf)
    model = AutoModelForCausalLM.from_pretrained(args.models, gguf_file=args.gguf, dtype=torch.float32)
    model.eval()
    hd = model.config.hidden_size // model.config.num_attention_heads
    print(f"kvpress {version('kvpress')}, transformers {version('transformers')}, torch {torch.__version__}, "
          f"model {args.gguf} loaded in {time.time() - t0:.0f} s ({model.config._attn_implementation})", flush=True)
    out = {"model": args.gguf, "budget": BUDGET, "passkey": [], "fidelity": {},
           "versions": {k: version(k) for k in ("kvpress", "transformers", "torch")}}

    # ---------------- passkey
    pk_units = parse_dump(os.path.join(args.work, "passkey.kept"))
    pk_recs = records(os.path.join(args.work, "passkey.json"))
    q_ids = tok(PK_QUESTION, add_special_tokens=False)["input_ids"]
    depths = []   # the eval runs the units in this order, so the dump holds them in it too
    for r in pk_recs:
        if r["unit"]["depth"] not in depths:
            depths.append(r["unit"]["depth"])
    assert len(depths) == len(pk_units), "passkey records and dump units differ in number"
    for u, depth in zip(pk_units, depths):
        ids, n = u["tokens"], len(u["tokens"])
        B = budget_tokens(n)
        recs = {r["policy"]: r["metrics"] for r in pk_recs if r["unit"]["depth"] == depth}
        assert recs["full"]["prompt_tokens"] == n + len(q_ids), "question ids differ from our eval's"
        t = time.time()
        full, idx = prefill(model, ids, make_presses(n, B, ladder=True))
        case = {"depth": depth, "n": n, "gold": recs["full"]["gold"], "budget_tokens": B,
                "kvpress_default_ratio_keeps": compute_n_kept(n, 1 - BUDGET), "configs": {}}
        case["full_hf"] = greedy(model, tok, copy.deepcopy(full), n, q_ids, 8)
        case["full_ours"] = recs["full"]["output"]
        for name, (pred, _, win) in CONFIGS.items():
            blk = next(b for b in u["blocks"] if pred(b["label"]))
            assert blk["n"] == n and len(blk["kept"][(0, 0)]) == B, (blk["label"], blk["n"], n, B)
            c = compare_kept(blk["kept"], (idx[0][name], idx[1][name]), n, win)
            c["answer_kvpress"] = greedy(model, tok, gathered_cache(full, idx[0][name], hd), n, q_ids, 8)
            c["label_ours"] = blk["label"]
            c["answer_ours"] = recs[blk["label"]]["output"]
            for side in ("ours", "kvpress"):
                c["correct_" + side] = first_digits(c["answer_" + side]) == case["gold"]
            case["configs"][name] = c
        case["ladder"] = ladder(u["blocks"], idx, n)
        out["passkey"].append(case)
        print(f"passkey depth {depth} n={n} B={B} key {case['gold']} ({time.time() - t:.0f} s): full answer "
              f"ours {case['full_ours']!r} transformers {case['full_hf']!r}", flush=True)
        for name, c in case["configs"].items():
            print(f"  {name:15s} J={c['jaccard_mean']:.3f} (min {c['jaccard_min']:.3f}, scored part "
                  f"{c['jaccard_scored_mean']:.3f}, identical lanes {c['lanes_identical']}/{c['lanes']}, "
                  f"{c['differing_at_tie']}/{c['positions_differing']} differing positions at a tie, median gap "
                  f"{c['differing_gap_median']:.2g}) answer ours {c['answer_ours']!r} kvpress {c['answer_kvpress']!r}", flush=True)
        print_ladder(case["ladder"])

    # ---------------- fidelity
    fu = parse_dump(os.path.join(args.work, "fidelity.kept"))[0]
    P, N = len(fu["tokens"]), args.tokens
    with open(os.path.join(args.data, "wikitext2", "wiki.test.raw"), "rb") as f:
        raw = f.read(N * 8 + 4096)   # eval/data.c skv_eval_document: the same prefix, no BOS
    doc = tok(raw.decode("utf-8", errors="ignore"), add_special_tokens=False)["input_ids"][:N]
    assert doc[:P] == fu["tokens"], "wikitext-2 document ids differ from the ones our eval prefilled"
    B = budget_tokens(P)
    presses = make_presses(P, B, ladder=True)
    t = time.time()
    full, idx = prefill(model, doc[:P], presses)
    # kvpress's own path gives the same indices and caches as the shared-prefill hooks
    own = {}
    for name, press in presses.items():
        if name.startswith("ladder:"):
            continue
        cache = DynamicCache()
        with press(model), torch.no_grad():
            model.model(input_ids=torch.tensor([doc[:P]]), past_key_values=cache)
        g = gathered_cache(full, idx[0][name], hd)
        same = all(torch.equal(cache.layers[l].keys, g.layers[l].keys) and
                   torch.equal(cache.layers[l].values, g.layers[l].values) for l in range(len(cache.layers)))
        own[name] = same
        assert same, f"{name}: kvpress's own compression differs from the hooks' (layer caches)"
    ref = block_logprobs(model, copy.deepcopy(full), doc[P:N - 1], P)
    fid = {"n_prefill": P, "tokens": N, "steps": N - 1 - P, "budget_tokens": B,
           "kvpress_default_ratio_keeps": compute_n_kept(P, 1 - BUDGET), "own_path_identical": own, "configs": {}}
    recs = records(os.path.join(args.work, "fidelity.json"))
    for name, (pred, _, win) in CONFIGS.items():
        blk = next(b for b in fu["blocks"] if pred(b["label"]))
        lp = block_logprobs(model, gathered_cache(full, idx[0][name], hd), doc[P:N - 1], P)
        kl = (ref.exp() * (ref - lp)).sum(-1)
        top1 = (ref.argmax(-1) == lp.argmax(-1)).double().mean().item()
        c = compare_kept(blk["kept"], (idx[0][name], idx[1][name]), P, win)
        rec = next((r for r in recs if r["policy"] == blk["label"]), None)
        c.update({"kl_mean_kvpress": kl.mean().item(), "kl_p95_kvpress": kl.quantile(0.95).item(),
                  "top1_kvpress": top1, "label_ours": blk["label"],
                  "metrics_ours": rec.get("metrics") if rec else None})
        fid["configs"][name] = c
        mo = c["metrics_ours"] or {}
        print(f"fidelity {name:15s} J={c['jaccard_mean']:.3f} (scored part {c['jaccard_scored_mean']:.3f}, "
              f"identical lanes {c['lanes_identical']}/{c['lanes']}) KL kvpress {c['kl_mean_kvpress']:.4f} "
              f"ours {mo.get('kl_mean', float('nan')):.4f}", flush=True)
    # kvpress's StreamingLLM against ours with its decode semantics (run_ours, fidelity_keep)
    # (its window differs from the prefill base's, so the cell ran a prefill of its own)
    ku, blk = next((u, b) for u in parse_dump(os.path.join(args.work, "fidelity_keep.kept"))
                   for b in u["blocks"] if b["label"].startswith("snapkv:window="))
    assert ku["tokens"] == fu["tokens"]
    c = compare_kept(blk["kept"], (idx[0]["streamingllm"], idx[1]["streamingllm"]), P, (0, 0))
    rec = next(r for r in records(os.path.join(args.work, "fidelity_keep.json")) if r["policy"] == blk["label"])
    c.update({"kl_mean_kvpress": fid["configs"]["streamingllm"]["kl_mean_kvpress"],
              "kl_p95_kvpress": fid["configs"]["streamingllm"]["kl_p95_kvpress"],
              "top1_kvpress": fid["configs"]["streamingllm"]["top1_kvpress"],
              "label_ours": blk["label"], "metrics_ours": rec["metrics"]})
    fid["configs"]["streamingllm-keep"] = c
    print(f"fidelity streamingllm-keep (ours {blk['label']}) J={c['jaccard_mean']:.3f} (identical lanes "
          f"{c['lanes_identical']}/{c['lanes']}) KL kvpress {c['kl_mean_kvpress']:.4f} ours "
          f"{rec['metrics']['kl_mean']:.4f}", flush=True)
    fid["ladder"] = ladder(fu["blocks"], idx, P)
    print_ladder(fid["ladder"])
    print(f"fidelity done in {time.time() - t:.0f} s", flush=True)
    out["fidelity"] = fid
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


# ------------------------------------------------------------------ KVzip

KVZIP_SINKS = 4
# name -> (our spec, predicate on our dump's label, kvpress press factory given (n, Hkv, L, B))
KVZIP_CONFIGS = {
    "kvzip": ("kvzip", lambda lab: lab == "kvzip",
              lambda n, hkv, L, B: KVzipPress(compression_ratio=kvzip_ratio(math.floor(B * hkv * L + 1e-9), n * hkv * L),
                                              n_sink=KVZIP_SINKS)),
    "kvzip-layer": ("kvzip:level=layer", lambda lab: "layer" in lab,
                    lambda n, hkv, L, B: KVzipPress(compression_ratio=kvzip_ratio(math.floor(B * hkv + 1e-9), n * hkv),
                                                    n_sink=KVZIP_SINKS, layerwise=True)),
    "kvzip-chunk128": ("kvzip:chunk=128", lambda lab: "chunk=128" in lab,
                       lambda n, hkv, L, B: KVzipPress(compression_ratio=kvzip_ratio(math.floor(B * hkv * L + 1e-9),
                                                                                     n * hkv * L),
                                                       n_sink=KVZIP_SINKS, chunk_size=128)),
}


def kvzip_ratio(keep, numel):
    """compression_ratio whose int(numel * ratio) pruned pairs leave exactly `keep` (ours: floor(B x lanes))"""
    cr = (numel - keep + 0.5) / numel
    assert numel - int(numel * cr) == keep
    return cr


def kvzip_suffix(tok):
    """KVzipPress.__call__'s suffix: what the chat template puts after the user message"""
    if tok.chat_template is None:
        return "\n"
    dummy = "dummy context"
    sep = "\n" + "#" * len(dummy)
    text = tok.apply_chat_template([{"role": "user", "content": dummy + sep}], add_generation_prompt=True,
                                   tokenize=False, enable_thinking=False)
    return text.split(sep)[1]


def set_masks(model, masks):
    for l, layer in enumerate(model.model.layers):
        layer.self_attn.masked_key_indices = masks[l] if masks else None


def kvpress_kvzip(model, tok, ids, press):
    """KVzipPress's own scoring and compression (KVzipPress.__call__ after its yield) on the
    prefilled cache of ids, the prefix being the 4 sinks -> (cache, kept {(l, h): [pos]}, scores
    (L, Hkv, n), masks per layer, seconds of the reconstruction pass)"""
    cache = DynamicCache()
    set_masks(model, None)
    with torch.no_grad():
        model.model(input_ids=torch.tensor([ids]), past_key_values=cache)
    press.post_init_from_model(model)
    press._context_ids = torch.tensor([ids])
    press._cache = cache
    press.prefix_length = KVZIP_SINKS
    press._suffix_ids = tok.encode(kvzip_suffix(tok), return_tensors="pt", add_special_tokens=False)
    for layer in model.model.layers:
        layer.self_attn.rotary_emb = model.model.rotary_emb
    t = time.time()
    with torch.no_grad():
        press._perform_kvzip_compression(model, tok)
    secs = time.time() - t
    scores = press.score_val[:, 0].float().clone()
    press._reset_internal_parameters()
    n, hkv = len(ids), model.config.num_key_value_heads
    kept, masks = {}, []
    for l, layer in enumerate(model.model.layers):
        mk = layer.self_attn.masked_key_indices
        masks.append(mk)
        keep = torch.ones(hkv, n, dtype=torch.bool)
        keep[mk[1], mk[2]] = False
        for j in range(hkv):
            kept[(l, j)] = keep[j].nonzero().flatten().tolist()
    assert cache.get_seq_length() == n, "the reconstruction tokens' KV stayed in kvpress's cache"
    return cache, kept, scores, masks, secs


def compare_kvzip(ours, theirs, scores, global_scope):
    """per-lane Jaccard of two non-uniform kept sets; each position kept by one side only is
    measured by kvpress's score there against kvpress's threshold (the lowest kept score over
    the scope the budget is shared in: all lanes, or the layer)"""
    js, same, gaps, dcount = [], 0, [], []
    L = scores.shape[0]
    thr_layer = {}
    for l in range(L):
        vals = [scores[l, h, p].item() for (ll, h), pos in theirs.items() if ll == l for p in pos]
        thr_layer[l] = min(vals)
    thr_all = min(thr_layer.values())
    for key in sorted(ours):
        l, h = key
        a, b = ours[key], theirs[key]
        js.append(jaccard(a, b))
        same += a == b
        dcount.append(len(a) - len(b))
        thr = thr_all if global_scope else thr_layer[l]
        gaps += [abs(scores[l, h, p].item() - thr) / max(abs(thr), 1e-30) for p in set(a) ^ set(b)
                 if p >= KVZIP_SINKS]
    na = [len(ours[k]) for k in sorted(ours)]
    nb = [len(theirs[k]) for k in sorted(ours)]
    ma, mb = sum(na) / len(na), sum(nb) / len(nb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(na, nb))
    var = math.sqrt(sum((x - ma) ** 2 for x in na) * sum((y - mb) ** 2 for y in nb))
    return {"jaccard_mean": sum(js) / len(js), "jaccard_min": min(js), "lanes_identical": same, "lanes": len(js),
            "kept_ours": sum(na), "kept_kvpress": sum(nb), "lane_count_corr": cov / var if var else 1.0,
            "lane_count_absdiff_mean": sum(abs(x) for x in dcount) / len(dcount),
            "positions_differing": len(gaps), "differing_gap_median": sorted(gaps)[len(gaps) // 2] if gaps else 0.0,
            "differing_gap_max": max(gaps) if gaps else 0.0,
            "jaccard_per_layer": [round(sum(js[l * (len(js) // L):(l + 1) * (len(js) // L)]) / (len(js) // L), 4)
                                  for l in range(L)]}


def kvzip_main(args):
    os.makedirs(args.work, exist_ok=True)
    kept_path, rec_path = os.path.join(args.work, "kvzip.kept"), os.path.join(args.work, "kvzip.json")
    if not (os.path.exists(kept_path) and os.path.exists(rec_path)):
        for p in (kept_path, rec_path):
            if os.path.exists(p):
                os.remove(p)
        cmd = ["nice", "-n", "19", args.smallkv, "eval", "fidelity", "--corpora", "wikitext2", "--tokens",
               str(args.tokens), "--prefill", str(args.prefill), "--limit", "1",
               "--policies", "full," + ",".join(c[0] for c in KVZIP_CONFIGS.values()),
               "--llm", os.path.join(args.models, args.gguf), "--budgets", str(BUDGET), "--kv", "f32",
               "--threads", "1", "--data", args.data, "-o", rec_path]
        print("ours:", " ".join(cmd), flush=True)
        t = time.time()
        subprocess.run(cmd, check=True, env=dict(os.environ, OMP_NUM_THREADS="1", SKV_DUMP_KEPT=kept_path))
        print(f"ours done in {time.time() - t:.0f} s", flush=True)
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(args.models, gguf_file=args.gguf)
    model = AutoModelForCausalLM.from_pretrained(args.models, gguf_file=args.gguf, dtype=torch.float32,
                                                 attn_implementation="sdpa")
    model.eval()
    cfg = model.config
    L, hkv = cfg.num_hidden_layers, cfg.num_key_value_heads
    print(f"kvpress {version('kvpress')}, transformers {version('transformers')}, torch {torch.__version__}, "
          f"model {args.gguf} loaded in {time.time() - t0:.0f} s", flush=True)
    units = parse_dump(kept_path)
    P, N = len(units[0]["tokens"]), args.tokens
    with open(os.path.join(args.data, "wikitext2", "wiki.test.raw"), "rb") as f:
        raw = f.read(N * 8 + 4096)   # eval/data.c skv_eval_document: the same prefix, no BOS
    doc = tok(raw.decode("utf-8", errors="ignore"), add_special_tokens=False)["input_ids"][:N]
    assert all(u["tokens"] == doc[:P] for u in units), "document ids differ from the ones our eval prefilled"
    B = BUDGET * P   # our session's mean lane budget at length P (not floored: level=global shares B x lanes)
    recs = records(rec_path)
    set_masks(model, None)
    cache = DynamicCache()
    with torch.no_grad():
        model.model(input_ids=torch.tensor([doc[:P]]), past_key_values=cache)
    ref = block_logprobs(model, cache, doc[P:N - 1], P)
    out = {"model": args.gguf, "budget": BUDGET, "n_prefill": P, "tokens": N, "steps": N - 1 - P,
           "versions": {k: version(k) for k in ("kvpress", "transformers", "torch")}, "configs": {}}
    for name, (spec, pred, factory) in KVZIP_CONFIGS.items():
        blk = next(b for u in units for b in u["blocks"] if pred(b["label"]))
        assert blk["n"] == P
        press = factory(P, hkv, L, B)
        t = time.time()
        kcache, kept, scores, masks, secs = kvpress_kvzip(model, tok, doc[:P], press)
        set_masks(model, masks)
        lp = block_logprobs(model, kcache, doc[P:N - 1], P)
        set_masks(model, None)
        kl = (ref.exp() * (ref - lp)).sum(-1)
        top1 = (ref.argmax(-1) == lp.argmax(-1)).double().mean().item()
        c = compare_kvzip(blk["kept"], kept, scores, name != "kvzip-layer")
        rec = next((r for r in recs if r["policy"] == blk["label"]), None)
        mo = rec["metrics"] if rec else {}
        c.update({"label_ours": blk["label"], "kl_mean_kvpress": kl.mean().item(),
                  "kl_p95_kvpress": kl.quantile(0.95).item(), "top1_kvpress": top1,
                  "kvpress_pass_seconds": secs, "metrics_ours": mo,
                  "memory_ours": rec.get("memory") if rec else None})
        out["configs"][name] = c
        print(f"{name:15s} J={c['jaccard_mean']:.3f} (min {c['jaccard_min']:.3f}, identical lanes "
              f"{c['lanes_identical']}/{c['lanes']}; kept {c['kept_ours']} vs {c['kept_kvpress']}, lane counts corr "
              f"{c['lane_count_corr']:.3f}, mean |diff| {c['lane_count_absdiff_mean']:.2f}; {c['positions_differing']} "
              f"positions differ, gap median {c['differing_gap_median']:.2g} max {c['differing_gap_max']:.2g}) "
              f"KL kvpress {c['kl_mean_kvpress']:.4f} ours {mo.get('kl_mean', float('nan')):.4f}; top-1 kvpress "
              f"{top1:.3f} ours {mo.get('top1', float('nan'))}; kvpress pass {secs:.1f} s ({time.time() - t:.0f} s)",
              flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
