#!/usr/bin/env bash
# Session 32, call 4 (one H200): issue 45's floods against `nanovllm serve` on the GPU (0.6B shape, Qwen3
# tokenizer), a small /v1/completions timed under each (scripts/bench/flood_check.py; target 2 s).
# Binaries as call 1.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
B=/tmp/b/new
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
$B/nanovllm make-test-model --out /tmp/q06t --preset qwen3-0.6b --seed 1 --tokenizer tests/data/qwen3-tokenizer > /dev/null
$B/nanovllm serve --model /tmp/q06t --port 18123 > "$OUT/serve.log" 2>&1 &
for _ in $(seq 60); do curl -s localhost:18123/health > /dev/null && break; sleep 1; done
timeout 240 python3 scripts/bench/flood_check.py 18123 --limit 2 --long-len 16000 2>&1 | tee "$OUT/flood.log"
echo "flood_check rc=${PIPESTATUS[0]}"
kill %1; wait
