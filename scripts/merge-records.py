#!/usr/bin/env python3
"""merge-records.py: merge `smallkv eval` result files (format smallkv-eval) into one.

Two evaluations that run at once must write two files (each process rewrites its own file
after every unit); this joins them afterwards so a later run resumes from one file.

    scripts/merge-records.py OUT.json IN.json [IN.json ...]

OUT may be one of the inputs. Records keep their order: OUT's first (when it exists), then
each input's records whose key is not there yet. A key found twice with different metrics
is an error (nothing is written): the same cell measured twice must agree, or one of the
runs is not what it claims. The output is written to a temporary file and renamed.
"""
import json
import os
import sys
import tempfile


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"merge-records: {path}: {e}")
    if not isinstance(d, dict) or d.get("format") != "smallkv-eval" or not isinstance(d.get("records"), list):
        sys.exit(f"merge-records: {path}: not a smallkv-eval results file")
    return d


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 2
    out, ins = argv[1], argv[2:]
    paths = ([out] if os.path.exists(out) and out not in ins else []) + ins
    merged, seen, version = [], {}, 1
    for p in paths:
        d = load(p)
        version = max(version, d.get("version", 1))
        added = 0
        for r in d["records"]:
            k = r.get("key")
            if not k:
                sys.exit(f"merge-records: {p}: a record without a key")
            if k in seen:
                if seen[k].get("metrics") != r.get("metrics"):
                    sys.exit(f"merge-records: {p}: key {k} already merged with other metrics")
                continue
            seen[k] = r
            merged.append(r)
            added += 1
        print(f"{p}: {len(d['records'])} records, {added} new", file=sys.stderr)
    fd, tmp = tempfile.mkstemp(prefix=".merge-", suffix=".json", dir=os.path.dirname(os.path.abspath(out)))
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"format": "smallkv-eval", "version": version, "records": merged}, f, indent="\t")
        f.write("\n")
    os.replace(tmp, out)
    print(f"{out}: {len(merged)} records", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
