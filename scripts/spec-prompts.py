#!/usr/bin/env python3
"""spec-prompts.py DIR: the prompts of the speculative-decoding benchmarks (spec-bench.sh,
llamacpp-spec.sh) as DIR/he0.txt, DIR/he10.txt (HumanEval 0 and 10, completions) and
DIR/gsm0.txt (GSM8K test #0's question), from the data folder ($SKV_DATA_DIR or data/,
filled by scripts/fetch-data.sh humaneval gsm8k)."""
import gzip
import json
import os
import subprocess
import sys

d = sys.argv[1]
data = os.environ.get('SKV_DATA_DIR') or 'data'
if subprocess.call(['scripts/fetch-data.sh', 'humaneval', 'gsm8k']):
    sys.exit('spec-prompts: the humaneval and gsm8k data sets are needed')
he = [json.loads(l) for l in gzip.open(f'{data}/humaneval/HumanEval.jsonl.gz', 'rt')]
for i in (0, 10):
    open(f'{d}/he{i}.txt', 'w').write(he[i]['prompt'])
g = [json.loads(l) for l in open(f'{data}/gsm8k/test.jsonl')]
open(f'{d}/gsm0.txt', 'w').write(g[0]['question'])
