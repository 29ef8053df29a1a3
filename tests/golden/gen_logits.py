#!/usr/bin/env python3
"""gen_logits.py: golden logits and perplexity from Hugging Face transformers for tests/test_forward.c.

transformers loads the GGUF, dequantises every tensor to fp32 and (for llama) un-permutes the
Q/K rows back to the Hugging Face layout; we run it in fp32 on the CPU. Writes, per model:
  tests/golden/<tag>_logits.txt  header lines, the prompt ids, then per position p (0..63):
                                 "p id:logit id:logit ..." the top-10 logits (descending)
  tests/golden/<tag>_wiki.txt    (SmolLM2 only) the first 2048 token ids of wikitext-2 test
                                 and the perplexity transformers gives for them
Perplexity convention (same as `smallkv ppl`): the file is tokenised as plain text (no BOS),
cut to the first N tokens, split into non-overlapping windows of ctx tokens (a short tail
window is dropped); in each window every position after the first is scored (the model sees
only the tokens of its own window); ppl = exp(mean NLL over all scored tokens).
Run: /work/pyenv/bin/python tests/golden/gen_logits.py [smollm2|qwen05 ...]  (CI never runs it)
"""
import math, os, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.environ.get("SKV_MODELS_DIR", os.path.join(HERE, "..", "..", "models"))
WIKI = os.path.join(os.environ.get("SKV_DATA_DIR") or os.path.join(HERE, "..", "..", "data"), "wikitext2", "wiki.test.raw")
TEXT = ("The history of the lighthouse begins in the ancient world, when fires were lit on hilltops "
        "to guide ships safely into harbour. Over the centuries, engineers built taller towers of "
        "stone and brick, and in the nineteenth century the invention of the Fresnel lens allowed a "
        "single lamp to be seen from more than twenty miles away. Today most lighthouses are automated.")
N_POS, TOPK = 64, 10
MODELS_LIST = {
    "smollm2": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen05": "qwen2.5-coder-0.5b.gguf",
}


def ppl_windows(model, ids, ctx):
    nll, cnt = 0.0, 0
    for w in range(len(ids) // ctx):
        x = torch.tensor([ids[w * ctx:(w + 1) * ctx]])
        with torch.no_grad():
            logits = model(x).logits[0].double()
        lp = torch.log_softmax(logits[:-1], dim=-1)
        tgt = x[0, 1:]
        nll -= lp[torch.arange(ctx - 1), tgt].sum().item()
        cnt += ctx - 1
    return math.exp(nll / cnt), cnt


def main(tags):
    torch.set_num_threads(2)
    for tag in tags:
        fname = MODELS_LIST[tag]
        tok = AutoTokenizer.from_pretrained(MODELS, gguf_file=fname)
        model = AutoModelForCausalLM.from_pretrained(MODELS, gguf_file=fname, torch_dtype=torch.float32)
        model.eval()
        ids = tok(TEXT, add_special_tokens=False)["input_ids"][:N_POS]
        assert len(ids) == N_POS, len(ids)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
        with open(os.path.join(HERE, f"{tag}_logits.txt"), "w") as f:
            f.write(f"# golden logits: transformers {__import__('transformers').__version__}, {fname}, fp32\n")
            f.write(f"model {fname}\nvocab {logits.shape[1]}\nn {N_POS}\nk {TOPK}\n")
            f.write("ids " + " ".join(map(str, ids)) + "\n")
            for p in range(N_POS):
                v, i = torch.topk(logits[p], TOPK)
                f.write(f"{p} " + " ".join(f"{a}:{b:.6f}" for a, b in zip(i.tolist(), v.tolist())) + "\n")
        print(tag, "logits written", flush=True)
        if tag == "smollm2":
            text = open(WIKI, encoding="utf-8").read()
            wids = tok(text, add_special_tokens=False)["input_ids"][:2048]
            ppl, cnt = ppl_windows(model, wids, 512)
            with open(os.path.join(HERE, f"{tag}_wiki.txt"), "w") as f:
                f.write(f"# first 2048 tokens of wikitext-2 wiki.test.raw ({fname} tokenizer, no BOS)\n")
                f.write(f"# transformers fp32 perplexity, ctx 512, non-overlapping, {cnt} scored tokens\n")
                f.write(f"ppl {ppl:.6f}\nn {len(wids)}\nids " + " ".join(map(str, wids)) + "\n")
            print(tag, "ppl", ppl, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["smollm2", "qwen05"])
