#!/usr/bin/env python3
"""gen_hf_arch_logits.py: reference logits from Hugging Face transformers for the tiny random
models of the newer families (tests/support/tiny_model.c, tiny_model_new_family: llama3 RoPE
scaling, mistral sliding window, qwen3 q/k norms, gemma3_text), checked by tests/test_arch.c.

The C test writes the model directories (config.json + model.safetensors, F32):
    mkdir -p /tmp/hf_arch && SKV_HF_EXPORT=/tmp/hf_arch build/tests/test_arch
this script loads each with AutoModelForCausalLM (fp32, CPU, eager attention), runs the 256
tokens below in one causal forward (the C test runs them as a prefill of 160 and 96 decode
steps) and writes tests/golden/hf_arch_logits.txt:
    "model <family>" then 256 lines "p<i> v0 v1 ..." (the logits of token ids 0, 15, 30, ...).
Run: /work/pyenv/bin/python tests/golden/gen_hf_arch_logits.py /tmp/hf_arch  (CI never runs it)
"""
import os, sys
import torch
import transformers
from transformers import AutoModelForCausalLM

FAMILIES = ("llama3", "mistral", "qwen3", "gemma3")
N_TOK, COL_STEP = 256, 15
TOKENS = [(i * 131 + 7) % 300 for i in range(N_TOK)]
HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "/tmp/hf_arch"
    out = [f"# golden logits: transformers {transformers.__version__}, torch {torch.__version__}, fp32, "
           f"tiny_model_new_family seed 46, token ids 0, {COL_STEP}, {2 * COL_STEP}, ..."]
    for fam in FAMILIES:
        model = AutoModelForCausalLM.from_pretrained(os.path.join(root, fam), dtype=torch.float32,
                                                     attn_implementation="eager")
        model.eval()
        with torch.no_grad():
            logits = model(torch.tensor([TOKENS])).logits[0]
        out.append(f"model {fam}")
        for i, row in enumerate(logits[:, ::COL_STEP].tolist()):
            out.append(f"p{i} " + " ".join(f"{v:.7g}" for v in row))
    with open(os.path.join(HERE, "hf_arch_logits.txt"), "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
