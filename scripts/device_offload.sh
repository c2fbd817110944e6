#!/usr/bin/env bash
# Layer-wise CPU KV offload on the device machine: CUDA offload tests, then bench offload on a
# Qwen3-4B-shaped model with YaRN (factor 4 -> 131072 positions) at 32K and 128K.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NANOVLLM_TEST_DATA=$PWD/tests/data
B=.carry/nanovllm
.carry/test_cuda --gtest_filter='CudaOffload*' 2>&1 | grep -E "FAILED|PASSED|Failure|identical|tokens" | head -20
$B make-test-model --out /tmp/q4 --preset qwen3-4b --seed 1 --config-override \
  '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' >/dev/null 2>&1
$B bench offload --backend cuda --model /tmp/q4 --context ${CONTEXTS:-4096,16384,32768,131072} --output-len ${OUTLEN:-16} 2>&1 | grep -v warn | tee $OUT/offload.txt
