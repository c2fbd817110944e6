#!/usr/bin/env bash
# Baseline CUDA benchmarks on the device machine (run from the repo root with the binary in .carry/).
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=.carry/nanovllm
$B make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 >/dev/null 2>&1
$B make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 >/dev/null 2>&1
NANOVLLM_LOG_LEVEL=info $B bench latency --backend cuda --model /tmp/q06 --context 1024 --decode-tokens 64 --prefill 1024,8192 --json-out $OUT/lat06.json
NANOVLLM_LOG_LEVEL=info $B bench latency --backend cuda --model /tmp/q8 --context 1024 --decode-tokens 64 --prefill 1024,8192 --json-out $OUT/lat8.json
timeout 200 $B bench throughput --backend cuda --model /tmp/q06 --num-seqs ${NSEQ:-64} --json-out $OUT/tp06.json
