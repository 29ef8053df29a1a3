#!/usr/bin/env python3
"""spec-prompts.py DIR: the prompts of the speculative-decoding benchmarks (spec-bench.sh,
llamacpp-spec.sh) as DIR/he0.txt, DIR/he10.txt (HumanEval 0 and 10, completions) and
DIR/gsm0.txt (GSM8K test #0's question), from ../shared/data."""
import gzip
import json
import sys

d = sys.argv[1]
he = [json.loads(l) for l in gzip.open('../shared/data/humaneval/HumanEval.jsonl.gz', 'rt')]
for i in (0, 10):
    open(f'{d}/he{i}.txt', 'w').write(he[i]['prompt'])
g = [json.loads(l) for l in open('../shared/data/gsm8k/test.jsonl')]
open(f'{d}/gsm0.txt', 'w').write(g[0]['question'])
