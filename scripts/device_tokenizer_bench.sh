#!/usr/bin/env bash
# Tokenizer throughput on the device machine: nano-vLLM (nanovllm bench tokenizer) vs HF tokenizers (Python)
# on the same mixed corpus, single thread; plus the golden-id cross-check against Python tokenizers.
set -uo pipefail
C=${1:-.carry/tok_corpus.txt}
.carry/nanovllm bench tokenizer --tokenizer tests/data/qwen3-tokenizer/tokenizer.json --corpus "$C" --passes 3
python3 scripts/tokenizer_golden_check_python.py
RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false python3 - "$C" <<'PY'
import sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file("tests/data/qwen3-tokenizer/tokenizer.json")
text = open(sys.argv[1], encoding="utf-8").read()
# the same ~4 KB chunks cut at line ends as nanovllm bench tokenizer
chunks, cur = [], []
n = 0
for line in text.splitlines(keepends=True):
    cur.append(line); n += len(line.encode())
    if n >= 4096:
        chunks.append("".join(cur)); cur, n = [], 0
if cur: chunks.append("".join(cur))
nbytes = len(text.encode())
best = 1e9
for _ in range(2):
    t0 = time.perf_counter(); ntok = sum(len(tok.encode(c).ids) for c in chunks); best = min(best, time.perf_counter() - t0)
print(f"HF tokenizers (python, 1 thread, 4 KB chunks): {nbytes/1e6:.1f} MB, {ntok} tokens, {nbytes/1e6/best:.2f} MB/s")
t0 = time.perf_counter(); tok.encode(text[:2_000_000]); dt = time.perf_counter() - t0
print(f"HF tokenizers (python, one long 2 MB text): {2.0/dt:.2f} MB/s")
PY
