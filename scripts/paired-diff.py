#!/usr/bin/env python3
"""paired-diff.py: accuracy difference between two policies on the same units (gsm8k, bbh,
passkey records of `smallkv eval`), with a 95 % percentile bootstrap interval over units
(the report's "vs full" column does this against the full cache only).

usage: scripts/paired-diff.py RESULTS.json [--task gsm8k] [--budget B] A B [B ...]
  A, B: policy labels as the records name them (e.g. smallkv:renorm:profile:score=now, quest)
prints one line per B: units in common, A - B in points, [2.5 %, 97.5 %] of 10000 resamples.
"""
import argparse, json, random, sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--task", default="gsm8k")
    ap.add_argument("--budget", type=float, default=None, help="compressed cells at this budget (full: any)")
    ap.add_argument("a")
    ap.add_argument("b", nargs="+")
    ap.add_argument("--resamples", type=int, default=10000)
    args = ap.parse_args()
    try:
        recs = json.load(open(args.results))["records"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"paired-diff: {args.results}: {e}")
    by = {}
    for r in recs:
        if r.get("task") != args.task:
            continue
        if args.budget is not None and r["policy"] != "full" and abs(r["budget"] - args.budget) > 1e-9:
            continue
        unit = json.dumps(r["unit"], sort_keys=True)
        by.setdefault(r["policy"], {})[unit] = 1 if r["metrics"]["correct"] else 0
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
        rng = random.Random(1)
        means = sorted(sum(d[rng.randrange(n)] for _ in range(n)) / n for _ in range(args.resamples))
        lo, hi = means[int(0.025 * args.resamples)], means[int(0.975 * args.resamples) - 1]
        inside = " (0 inside)" if lo <= 0 <= hi else ""
        print(f"{args.a} - {b}: {n} units, {100 * sum(d) / n:+.1f} points [{100 * lo:+.1f}, {100 * hi:+.1f}]{inside}")


if __name__ == "__main__":
    main()
