#!/usr/bin/env bash
# The closing device run: CUDA tests, HF bf16 agreement (0.6B/4B shapes), latency, throughput next to HF
# transformers in the same run.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NANOVLLM_TEST_DATA=$PWD/tests/data
B=.carry/nanovllm
echo "== test_cuda"; .carry/test_cuda > $OUT/test_cuda.log 2>&1; grep -E "^\[  (PASSED|FAILED)" $OUT/test_cuda.log
$B make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 >/dev/null 2>&1
$B make-test-model --out /tmp/q4 --preset qwen3-4b --seed 1 >/dev/null 2>&1
$B make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 >/dev/null 2>&1
echo "== HF bf16 agreement"
for m in q06 q4; do PYTHONUNBUFFERED=1 python3 scripts/hf_bf16_agreement.py --nanovllm $B --model /tmp/$m \
   --json-out $OUT/agree_$m.json 2>&1 | grep -E "agreement|Error|error"; done
echo "== latency"
$B bench latency --backend cuda --model /tmp/q06 --context 1024 --decode-tokens 64 --prefill 1024,8192 --json-out $OUT/lat06.json 2>&1 | grep -v warn
$B bench latency --backend cuda --model /tmp/q8 --context 1024 --decode-tokens 64 --prefill 1024,8192,32768 --json-out $OUT/lat8.json 2>&1 | grep -v warn
echo "== throughput vs HF (same run)"; HF_TIMEOUT=300 HF_BATCH=${HF_BATCH:-256} bash scripts/device_hf_compare.sh
