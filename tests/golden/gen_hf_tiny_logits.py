#!/usr/bin/env python3
"""gen_hf_tiny_logits.py: reference logits from Hugging Face transformers for the tiny random
models of tests/support/tiny_model.c (checked by tests/test_hf.c, test_transformers_*).

The C test writes the model directories (config.json + model.safetensors, F32):
    SKV_HF_EXPORT=/tmp/hf_tiny build/tests/test_hf
this script loads each with AutoModelForCausalLM (fp32, CPU), runs the 9 tokens below in one
causal forward, and writes tests/golden/hf_tiny_logits.txt:
    "model <arch>" then 9 lines "p<i> v0 v1 ... v<vocab-1>" (logits at position i).
Run: /work/pyenv/bin/python tests/golden/gen_hf_tiny_logits.py /tmp/hf_tiny  (CI never runs it)
"""
import os, sys
import torch
import transformers
from transformers import AutoModelForCausalLM

TOKENS = [1, 17, 299, 42, 0, 150, 7, 8, 9]
HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "/tmp/hf_tiny"
    out = [f"# golden logits: transformers {transformers.__version__}, fp32, tiny_model.c seed 21",
           "tokens " + " ".join(map(str, TOKENS))]
    for arch in ("llama", "qwen2"):
        model = AutoModelForCausalLM.from_pretrained(os.path.join(root, arch), dtype=torch.float32)
        model.eval()
        with torch.no_grad():
            logits = model(torch.tensor([TOKENS])).logits[0]
        out.append(f"model {arch}")
        for i, row in enumerate(logits.tolist()):
            out.append(f"p{i} " + " ".join(f"{v:.7g}" for v in row))
    with open(os.path.join(HERE, "hf_tiny_logits.txt"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
