#!/usr/bin/env python3
"""paired-diff.py: difference between two policies on the same units of `smallkv eval`
records, with a 95 % percentile bootstrap interval over units (the report's "vs full" column
does this against the full cache only): accuracy points for gsm8k, bbh and passkey; mean KL
(nats, each document's mean over its steps) for fidelity.

usage: scripts/paired-diff.py RESULTS.json [...] [--task gsm8k] [--budget B] [--corpus C] [--docs LO-HI] A B [B ...]
  --task: one task, or fidelity,depth (an `eval depth` cell is a fidelity cell at one SLM depth)
  --docs: fidelity: documents LO..HI of each corpus only (e.g. 4-7, the held-out ones)
  A, B: policy labels as the records name them (e.g. smallkv:renorm:profile:score=now, quest),
        or LABEL@BUDGET for a cell at its own budget (e.g. quest@0.51)
prints one line per B: units in common, A - B, [2.5 %, 97.5 %] of 10000 resamples.
"""
import argparse, json, sys

from skv_records import bootstrap_mean, doc_range, load_records


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", type=str)
    ap.add_argument("--task", default="gsm8k")
    ap.add_argument("--budget", type=float, default=None, help="compressed cells at this budget (full: any)")
    ap.add_argument("--corpus", default=None, help="fidelity: this corpus only")
    ap.add_argument("--docs", default=None, help="fidelity: documents LO-HI of each corpus only")
    ap.add_argument("--pair", nargs="+", required=True, metavar="LABEL", help="A B [B ...]")
    ap.add_argument("--resamples", type=int, default=10000)
    args = ap.parse_args()
    if len(args.pair) < 2:
        sys.exit("paired-diff: --pair needs A and at least one B")
    args.a, args.b = args.pair[0], args.pair[1:]
    recs = load_records(args.results, "paired-diff")
    tasks = set(args.task.split(","))
    fid = tasks <= {"fidelity", "depth"}
    if len(tasks) > 1 and not fid:
        sys.exit("paired-diff: several tasks only as fidelity,depth")
    docs = doc_range(args.docs, "paired-diff")
    wanted = {}   # label -> budget it asks for (None: any / --budget)
    for p in args.pair:
        name, _, b = p.partition("@")
        wanted[p] = (name, float(b) if b else None)
    by = {}
    for r in recs:
        if r.get("task") not in tasks:
            continue
        if fid and args.corpus and r["unit"].get("corpus") != args.corpus:
            continue
        if fid and docs is not None and r["unit"].get("doc") not in docs:
            continue
        unit = json.dumps(r["unit"], sort_keys=True)
        val = r["metrics"]["kl_mean"] if fid else (1 if r["metrics"]["correct"] else 0)
        for label, (name, b) in wanted.items():
            if r["policy"] != name:
                continue
            b = b if b is not None else args.budget
            if b is not None and name != "full" and abs(r["budget"] - b) > 1e-9:
                continue
            by.setdefault(label, {})[unit] = val
    for p in [args.a] + args.b:
        if p not in by:
            sys.exit(f"paired-diff: no {args.task} records of policy '{p}' (have: {', '.join(sorted(by))})")
    for b in args.b:
        common = sorted(set(by[args.a]) & set(by[b]))
        if not common:
            print(f"{args.a} - {b}: no units in common")
            continue
        d = [by[args.a][u] - by[b][u] for u in common]
        n = len(d)
        lo, hi = bootstrap_mean(d, args.resamples)
        inside = " (0 inside)" if lo <= 0 <= hi else ""
        if fid:
            print(f"{args.a} - {b}: {n} documents, {sum(d) / n:+.3f} nats [{lo:+.3f}, {hi:+.3f}]{inside}")
        else:
            print(f"{args.a} - {b}: {n} units, {100 * sum(d) / n:+.1f} points [{100 * lo:+.1f}, {100 * hi:+.1f}]{inside}")


if __name__ == "__main__":
    main()
