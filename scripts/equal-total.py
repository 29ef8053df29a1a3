#!/usr/bin/env python3
"""equal-total.py: one row per policy and budget of `smallkv eval` records with the device
bytes each cell really held, for tables at equal total device memory (docs/results.md
sections 15-17).

Device total = LLM hot tier (Quest's page bounds included) + the SLM's cache, as a share
of the full cache's bytes (records' `memory`), the mean over units. gsm8k / bbh / passkey:
correct answers with a 95 % Wilson interval and, where a `full` cell is among the records,
how many units give the full cache's answer; fidelity: mean KL over documents with a 95 %
percentile bootstrap over documents.

usage: scripts/equal-total.py RESULTS.json [...] [--task gsm8k] [--docs LO-HI] [--units N]
  --docs: fidelity: documents LO..HI of each corpus only (e.g. 4-7, the held-out ones)
  --units: only cells with at least N units (default 1); the n column says how many
"""
import argparse, json, math, sys

from skv_records import bootstrap_mean, doc_range, load_records


def wilson(k, n, z=1.959964):
    if n == 0:
        return 0.0, 0.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return c - h, c + h


def device_share(m):
    full = m.get("full_equiv_bytes") or 0
    if full <= 0:
        return None
    # hot_bytes already holds hot_meta_bytes (Quest's page bounds)
    return (m.get("hot_bytes", 0) + m.get("slm_cache_bytes", 0)) / full


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+")
    ap.add_argument("--task", default="gsm8k")
    ap.add_argument("--docs", default=None)
    ap.add_argument("--units", type=int, default=1)
    args = ap.parse_args()
    recs = load_records(args.results, "equal-total")
    docs = doc_range(args.docs, "equal-total")
    fid = args.task in ("fidelity", "depth")
    cells = {}   # (policy, budget) -> {unit: (value, share, pred)}
    for r in recs:
        if r.get("task") != args.task:
            continue
        if fid and docs is not None and r["unit"].get("doc") not in docs:
            continue
        unit = json.dumps(r["unit"], sort_keys=True)
        m = r["metrics"]
        val = m["kl_mean"] if fid else (1 if m.get("correct") else 0)
        cells.setdefault((r["policy"], r["budget"]), {})[unit] = (val, device_share(r.get("memory", {})), m.get("pred"))
    if not cells:
        sys.exit(f"equal-total: no {args.task} records")
    full = next((v for (p, _), v in cells.items() if p == "full"), None)
    if fid:
        print("| policy | hot budget | n | device total / full | mean KL [95 % CI] |")
        print("|---|---:|---:|---:|---:|")
    else:
        same = " same answer as full |" if full else ""
        print("| policy | hot budget | n | device total / full | correct | accuracy [95 % CI] |" + same)
        print("|---|---:|---:|---:|---:|---:|" + ("---:|" if full else ""))
    for (pol, b), units in sorted(cells.items(), key=lambda kv: (kv[0][0] != "full", kv[0][1], kv[0][0])):
        n = len(units)
        if n < args.units:
            continue
        shares = [s for _, s, _ in units.values() if s is not None]
        share = f"{100 * sum(shares) / len(shares):.1f} %" if shares else "-"
        vals = [v for v, _, _ in units.values()]
        if fid:
            lo, hi = bootstrap_mean(vals)
            print(f"| {pol} | {100 * b:g} % | {n} | {share} | {sum(vals) / n:.3f} [{lo:.3f}, {hi:.3f}] |")
            continue
        k = sum(vals)
        lo, hi = wilson(k, n)
        row = f"| {pol} | {100 * b:g} % | {n} | {share} | {k} | {100 * k / n:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}] |"
        if full:
            common = [u for u in units if u in full]
            row += f" {sum(1 for u in common if units[u][2] == full[u][2])} of {len(common)} |"
        print(row)


if __name__ == "__main__":
    main()
