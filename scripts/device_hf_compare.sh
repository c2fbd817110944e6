#!/usr/bin/env bash
# nano-vLLM vs HF transformers on the same checkpoint and throughput workload, one run (device machine).
# HF_BATCH: HF's batch (default 256; an 80 GB H100 needs 128: at 256 its SDPA runs out of memory).
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=.carry/nanovllm
$B make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 >/dev/null 2>&1
$B bench throughput --backend cuda --model /tmp/q06 --num-seqs ${NSEQ:-256} --dump-workload /tmp/wl.json \
   --json-out $OUT/tp06.json 2>&1 | grep -v warn
PYTHONUNBUFFERED=1 timeout ${HF_TIMEOUT:-400} python3 scripts/hf_bench_throughput.py --model /tmp/q06 \
   --workload /tmp/wl.json --batch ${HF_BATCH:-256} --json-out $OUT/hf_tp06.json 2>&1 | grep -v -i "warn\|Loading"
