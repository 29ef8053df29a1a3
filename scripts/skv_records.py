"""skv_records.py: what the scripts reading `smallkv eval` result files share: loading their
records, the --docs LO-HI range, and the 95 % percentile bootstrap of a mean."""
import json
import random
import sys


def load_records(paths, prog):
    """Every record of the files, in order; exits with PROG: PATH: why on a bad file."""
    recs = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                recs += json.load(f)["records"]
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"{prog}: {path}: {e}")
    return recs


def doc_range(arg, prog):
    """--docs LO-HI (or N) as a range, None when not given; exits on a malformed one."""
    if not arg:
        return None
    lo, _, hi = arg.partition("-")
    try:
        return range(int(lo), int(hi or lo) + 1)
    except ValueError:
        sys.exit(f"{prog}: bad --docs '{arg}' (LO-HI)")


def bootstrap_mean(xs, resamples=10000):
    """[2.5 %, 97.5 %] of the mean of xs over resamples with replacement (seeded: repeatable)."""
    n = len(xs)
    rng = random.Random(1)
    means = sorted(sum(xs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]
