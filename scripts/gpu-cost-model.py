#!/usr/bin/env python3
"""gpu-cost-model.py: a MODEL (not a measurement) of the per-step decode time on one H200 for
each policy, batch 1/16/64 and 4K/32K context, from counts measured on the CPU.

Decode at these sizes is bound by memory traffic, so the model adds up the bytes each step
moves per tier and divides by that tier's bandwidth, checks the matmul FLOPs against the
compute roof, and adds a fixed per-layer overhead:

  HBM bytes / step = LLM weights + B x (LLM K/V read: hot tier, or the whole cache for full)
                     [+ B x Quest page bounds] [+ SLM weights to its depth + B x SLM cache
                      (fp16, or quantised rows: --slm-kv) + B x its score rows]
  host->GPU bytes  = B x restores per step x K/V bytes per restored token (cold tier in host
                     memory, PCIe; not overlapped with compute: an upper bound)
  step time        = max(HBM / bw_hbm, FLOPs / flops) + host bytes / bw_pcie + layers x overhead

Speculative decoding (--draft K with acceptance a tokens per pass): a round is one LLM pass
over K+1 rows (weights read once; K+1 times the FLOPs and the attention reads of one row) and
K+1 SLM steps with its LM head; it yields a+1 tokens, so time per token = round / (a+1).

Bytes per token per tier are those `smallkv generate --stats` reports (docs/performance.md,
"Device memory against context length"): the SLM cache's rows in groups of 32 elements with
an fp16 scale (q8: 34 B, q4: 20 B per group; k8v4: 8-bit keys, 4-bit values) and SmallKV's
score rows (4 B per SLM head and layer to its depth; twice that with column sums, --colsum).
--crossover prints, per batch size, the shortest context at which each SmallKV setting's
step is cheaper than the full cache's in this model.

Inputs measured on the CPU (docs/performance.md says which run): the restore rate of the
cold-tier policies (restored tokens per step as a fraction of the hot tier), the drafts'
mean accepted length. Everything else is arithmetic on the model shapes (bf16 weights and
K/V on the GPU) and the H200's datasheet figures below, derated by the efficiency factors.
Change any of them with the flags; --help lists them.

Run: python3 scripts/gpu-cost-model.py [--pair qwen-1.5b|qwen-7b] [--restore-smallkv 0.36] ...
"""
import argparse

# model shapes (public model cards / GGUF metadata): parameters, layers, KV heads, head dim
MODELS = {
    "qwen2.5-0.5b": dict(params=0.494e9, layers=24, heads=14, kv_heads=2, head_dim=64, lm_head=151936 * 896),
    "qwen2.5-1.5b": dict(params=1.544e9, layers=28, heads=12, kv_heads=2, head_dim=128, lm_head=151936 * 1536),
    "qwen2.5-7b": dict(params=7.616e9, layers=28, heads=28, kv_heads=4, head_dim=128, lm_head=152064 * 3584),
}
PAIRS = {"qwen-1.5b": ("qwen2.5-1.5b", "qwen2.5-0.5b", 23), "qwen-7b": ("qwen2.5-7b", "qwen2.5-0.5b", 23)}
ESZ = 2  # bf16


# bytes per cached element of the SLM's K and V rows (kernels/cpu/kvquant.h: groups of 32,
# an fp16 scale (q8) or scale and minimum (q4) per group)
SLM_KV = {"f16": (2.0, 2.0), "q8": (34 / 32, 34 / 32), "k8v4": (34 / 32, 20 / 32), "q4": (20 / 32, 20 / 32)}


def kv_bytes(m):
    """K+V bytes per token over all layers."""
    return m["layers"] * 2 * m["kv_heads"] * m["head_dim"] * ESZ


def slm_token_bytes(a, slm):
    """The SLM's bytes per token to its depth: its cache rows (a.slm_kv) and SmallKV's score
    rows (one float per head and layer, two with column sums)."""
    kb, vb = SLM_KV[a.slm_kv]
    cache = a.depth * slm["kv_heads"] * slm["head_dim"] * (kb + vb)
    score = a.depth * slm["heads"] * 4 * (2 if a.colsum else 1)
    return cache + score


def step(a, llm, slm, policy, B, S, rows=1):
    """Seconds for one LLM pass of `rows` rows per sequence (plus the SLM's step when the
    policy runs it) and the bytes by tier, per the model in the docstring."""
    b = a.budget
    w = llm["params"] * ESZ
    kv = kv_bytes(llm)
    hot = S if policy in ("full", "full+draft") else b * S
    hbm = w + B * hot * kv
    flops = 2 * llm["params"] * B * rows + 4 * B * rows * hot * llm["layers"] * llm["kv_heads"] * llm["head_dim"] * a.group
    host = 0.0
    layers = llm["layers"]
    if policy.startswith("quest"):
        hbm += B * (S / a.page) * kv / 2  # per page one min and one max key row (K only)
        host += B * a.restore_quest * hot * kv
    if policy.startswith("smallkv"):
        host += B * a.restore_smallkv * hot * kv
    if policy.startswith("smallkv"):
        d = a.depth
        # the SLM to its depth, no LM head below full depth, and its whole cache
        sw = (slm["params"] - slm["lm_head"]) * ESZ * (d / slm["layers"])
        hbm += sw + B * S * slm_token_bytes(a, slm)
        flops += 2 * slm["params"] * B
        layers += d
    t = max(hbm / (a.bw_hbm * 1e12 * a.eff_hbm), flops / (a.flops * 1e12 * a.eff_flops))
    t += host / (a.bw_pcie * 1e9 * a.eff_pcie) + layers * a.layer_us * 1e-6
    return t, hbm, host


def spec_token(a, llm, slm, policy, B, S, K, acc):
    """Seconds per generated token with K drafts and acc accepted per pass."""
    # the LLM verifies K+1 rows: weights and cache read once, K+1 rows of FLOPs
    t_llm, hbm, host = step(a, llm, slm, "full" if policy == "full+draft" else "h2o", B, S, rows=K + 1)
    if policy.startswith("smallkv"):
        host = B * a.restore_smallkv * a.budget * S * kv_bytes(llm) * (K + 1)
        t_llm += host / (a.bw_pcie * 1e9 * a.eff_pcie)
    # K+1 SLM steps, each over its full cache and all layers (it drafts from its logits)
    s_w = slm["params"] * ESZ
    t_slm = (K + 1) * ((s_w + B * S * kv_bytes(slm)) / (a.bw_hbm * 1e12 * a.eff_hbm) + slm["layers"] * a.layer_us * 1e-6)
    return (t_llm + t_slm) / (acc + 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="qwen-1.5b", choices=sorted(PAIRS), help="LLM/SLM pair (default qwen-1.5b)")
    ap.add_argument("--budget", type=float, default=0.2, help="hot-tier fraction (default 0.2)")
    ap.add_argument("--restore-smallkv", type=float, default=0.36,
                    help="smallkv: restored tokens per lane per step / hot tokens per lane (measured on the CPU)")
    ap.add_argument("--restore-quest", type=float, default=0.16, help="the same for quest (measured on the CPU)")
    ap.add_argument("--draft", type=int, default=4, help="drafted tokens per round (default 4)")
    ap.add_argument("--acc-full", type=float, default=3.6, help="mean accepted per pass, full cache (measured)")
    ap.add_argument("--acc-smallkv", type=float, default=3.1, help="mean accepted per pass, smallkv 20%% (measured)")
    ap.add_argument("--page", type=int, default=16, help="Quest page size")
    ap.add_argument("--slm-kv", default="f16", choices=sorted(SLM_KV),
                    help="the SLM cache's element type for the smallkv rows (default f16; a k8v4 row is always added)")
    ap.add_argument("--colsum", action="store_true", help="SmallKV keeps the SLM's column sums too (score=acc)")
    ap.add_argument("--contexts", type=contexts, default="4096,16384,32768", help="context lengths (tokens) of the table")
    ap.add_argument("--crossover", action="store_true",
                    help="print the shortest context at which each SmallKV setting's step beats the full cache's")
    ap.add_argument("--group", type=int, default=6, help="query heads per KV head (attention FLOPs)")
    ap.add_argument("--bw-hbm", type=float, default=4.8, help="HBM3e TB/s (H200 datasheet)")
    ap.add_argument("--bw-pcie", type=float, default=64, help="host link GB/s (PCIe 5 x16)")
    ap.add_argument("--flops", type=float, default=989, help="dense bf16 TFLOP/s (H200 SXM datasheet)")
    ap.add_argument("--eff-hbm", type=float, default=0.8, help="achieved share of HBM bandwidth")
    ap.add_argument("--eff-pcie", type=float, default=0.8, help="achieved share of the host link")
    ap.add_argument("--eff-flops", type=float, default=0.5, help="achieved share of the matmul roof")
    ap.add_argument("--layer-us", type=float, default=10, help="fixed overhead per layer per step (launches, norms), us")
    a = ap.parse_args()
    ln, sn, a.depth = PAIRS[a.pair]
    llm, slm = MODELS[ln], MODELS[sn]
    print(f"# MODEL, not a measurement: H200, {ln} (+ {sn} at depth {a.depth}), bf16, budget {a.budget:g}, "
          f"restores per step {a.restore_smallkv:g} (smallkv) / {a.restore_quest:g} (quest) of the hot tier, draft {a.draft} (accepted {a.acc_full:g} full / {a.acc_smallkv:g} smallkv)")
    if a.crossover:
        crossover(a, llm, slm)
        return
    print("| policy | context | batch | ms/token | tokens/s/seq | tokens/s total | HBM GB/step | host GB/step | vs full |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for S in a.contexts:
        for B in (1, 16, 64):
            full, _, _ = step(a, llm, slm, "full", B, S)
            rows = []
            for pol in ("full", "h2o / snapkv / streamingllm", "quest", "smallkv"):
                key = pol.split(" ")[0]
                t, hbm, host = step(a, llm, slm, key, B, S)
                rows.append((pol + (f" ({a.slm_kv} SLM cache)" if key == "smallkv" else ""), t, hbm, host))
            if a.slm_kv != "k8v4":
                kv0, a.slm_kv = a.slm_kv, "k8v4"
                t, hbm, host = step(a, llm, slm, "smallkv", B, S)
                a.slm_kv = kv0
                rows.append(("smallkv (k8v4 SLM cache)", t, hbm, host))
            for pol, acc in (("full+draft", a.acc_full), ("smallkv+draft", a.acc_smallkv)):
                t = spec_token(a, llm, slm, pol, B, S, a.draft, acc)
                rows.append((f"{pol} (K={a.draft})", t, float("nan"), float("nan")))
            for pol, t, hbm, host in rows:
                fits = B * S * kv_bytes(llm) + llm["params"] * ESZ < 141e9 or not pol.startswith("full")
                gb = "-" if hbm != hbm else f"{hbm / 1e9:.2f}"
                hgb = "-" if host != host else f"{host / 1e9:.3f}"
                print(f"| {pol} | {S // 1024}K | {B} | {t * 1e3:.2f} | {1 / t:.0f} | {B / t:.0f} | "
                      f"{gb} | {hgb} | {full / t:.2f}{'' if fits else ' (cache > 141 GB)'} |")


def contexts(text):
    """--contexts: comma-separated positive token counts."""
    try:
        v = [int(x) for x in text.split(",")]
    except ValueError:
        v = []
    if not v or min(v) < 1:
        raise argparse.ArgumentTypeError(f"'{text}': want token counts such as 4096,32768")
    return v


def crossover(a, llm, slm):
    """Per batch size and SLM cache type, the shortest context (in steps of 256 tokens, up to
    the LLM's 128K) at which a SmallKV step costs less than a full-cache step."""
    print("| batch | SLM cache | SmallKV cheaper than full from | step there (ms) |")
    print("|---:|---|---:|---:|")
    kv0 = a.slm_kv
    for B in (1, 16, 64):
        for kv in ("f16", "q8", "k8v4", "q4"):
            a.slm_kv = kv
            hit = next((S for S in range(256, 131073, 256)
                        if step(a, llm, slm, "smallkv", B, S)[0] < step(a, llm, slm, "full", B, S)[0]), None)
            where = f"{hit:,} tokens" if hit else "never (to 128K)"
            ms = f"{step(a, llm, slm, 'smallkv', B, hit)[0] * 1e3:.2f}" if hit else "-"
            print(f"| {B} | {kv} | {where} | {ms} |")
    a.slm_kv = kv0


if __name__ == "__main__":
    main()
