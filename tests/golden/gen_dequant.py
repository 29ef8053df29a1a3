#!/usr/bin/env python3
"""gen_dequant.py: reference dequantised values from gguf-py, for tests/test_quant.c.

Writes tests/golden/dequant.txt:
1. for a few tensors of each storage type found in the model files, the first `n`
   weights of one row, dequantised by gguf-py (independent of our C code):
       entry <model file> <tensor name> <type name> <row> <n>
       <n floats, %.9g, space separated>
2. for every type gguf-py can dequantise that we support (including Q4_0, Q5_1, Q5_K and
   F16/BF16, absent from the model files), two blocks of random bytes (with sane fp16
   scales) and their gguf-py dequantisation:
       block <type name> <n weights>
       <the raw bytes as hex>
       <n floats>
Run from the repo root: /work/pyenv/bin/python tests/golden/gen_dequant.py
(CI never runs this; the output is committed.)"""
import sys
import numpy as np
import gguf

MODELS = "models"
ENTRIES = [
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "token_embd.weight", 0, 256),
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "token_embd.weight", 1000, 256),
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "blk.0.ffn_down.weight", 0, 512),
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "blk.0.ffn_down.weight", 575, 256),
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "blk.0.attn_norm.weight", 0, 128),
    ("qwen2.5-coder-0.5b.gguf", "token_embd.weight", 5, 256),
    ("qwen2.5-coder-0.5b.gguf", "blk.0.ffn_down.weight", 0, 512),
    ("qwen2.5-coder-0.5b.gguf", "blk.11.ffn_down.weight", 3, 512),
    ("qwen2.5-coder-1.5b.gguf", "token_embd.weight", 100, 512),
    ("qwen2.5-coder-1.5b.gguf", "output.weight", 7, 512),
]


def main():
    out = open("tests/golden/dequant.txt", "w")
    readers = {}
    for model, name, row, n in ENTRIES:
        if model not in readers:
            readers[model] = gguf.GGUFReader(f"{MODELS}/{model}")
        r = readers[model]
        t = next(t for t in r.tensors if t.name == name)
        qtype = t.tensor_type
        data = np.asarray(t.data)
        rowdata = data.reshape(-1, data.shape[-1])[row]  # (row bytes) or (row floats)
        if qtype == gguf.GGMLQuantizationType.F32:
            vals = rowdata.astype(np.float32)
        else:
            vals = gguf.quants.dequantize(rowdata.view(np.uint8), qtype).reshape(-1)
        vals = vals[:n]
        out.write(f"entry {model} {name} {qtype.name} {row} {n}\n")
        out.write(" ".join(f"{float(v):.9g}" for v in vals) + "\n")
        print(model, name, qtype.name, row, n, file=sys.stderr)
    random_blocks(out)


# (type, block bytes, weights per block, byte offsets of fp16 scale fields)
BLOCKS = [
    ("F16", 2, 1, []),
    ("BF16", 2, 1, []),
    ("Q4_0", 18, 32, [0]),
    ("Q4_1", 20, 32, [0, 2]),
    ("Q5_0", 22, 32, [0]),
    ("Q5_1", 24, 32, [0, 2]),
    ("Q8_0", 34, 32, [0]),
    ("Q4_K", 144, 256, [0, 2]),
    ("Q5_K", 176, 256, [0, 2]),
    ("Q6_K", 210, 256, [208]),
]


def random_blocks(out):
    rng = np.random.default_rng(1234)
    for name, nbytes, nw, scale_offs in BLOCKS:
        qtype = gguf.GGMLQuantizationType[name]
        if nw == 1:  # float types: 64 sane values
            vals = (rng.standard_normal(64) * 3).astype(np.float32)
            raw = vals.astype(np.float16).view(np.uint8) if name == "F16" else \
                (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
        else:
            raw = rng.integers(0, 256, size=2 * nbytes, dtype=np.uint8)
            for b in range(2):
                for off in scale_offs:
                    h = np.array([rng.uniform(0.001, 0.1) * rng.choice([-1, 1])], np.float16)
                    raw[b * nbytes + off: b * nbytes + off + 2] = h.view(np.uint8)
        vals = gguf.quants.dequantize(raw, qtype).reshape(-1)
        out.write(f"block {name} {len(vals)}\n")
        out.write(raw.tobytes().hex() + "\n")
        out.write(" ".join(f"{float(v):.9g}" for v in vals) + "\n")
        print("block", name, len(vals), file=sys.stderr)


if __name__ == "__main__":
    main()
