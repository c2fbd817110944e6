#!/bin/bash
# Session 30 call 4 (one GPU): A/B in one call of the decode-buffer copies as one cudaMemcpyBatchAsync per
# layer and direction (new) against one cudaMemcpyAsync each (old = b401642): 128K offloaded Quest decode,
# 4 requests (pages of 32) and one request (pages of 16); the offload tests of the new binary.
set -u
D=.dev-s30
for f in nanovllm nanovllm_old test_cuda; do xz -dkf -T0 "$D/$f.xz"; chmod +x $D/$f; done
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$D/nanovllm make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null &
MK=$!
log tests
timeout 200 $D/test_cuda --gtest_filter='CudaOffload.*' > $OUT/test_cuda.log 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tokens equal" $OUT/test_cuda.log
wait $MK
OFF="bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --no-compare --sparse-policy quest --sparse-budget 2048 --output-len 48"
for v in old new; do
  B=$D/nanovllm; [ $v = old ] && B=$D/nanovllm_old
  log "$v: 4 requests, pages 32"; timeout 200 $B $OFF --sparse-page-size 32 --concurrency 4 --json-out $OUT/c4_p32_$v.json 2>&1 | grep -E "x 4 requests|rror"
done
for v in old new; do
  B=$D/nanovllm; [ $v = old ] && B=$D/nanovllm_old
  log "$v: 1 request, pages 16"; timeout 120 $B $OFF --sparse-page-size 16 --json-out $OUT/c1_$v.json 2>&1 | grep -E "decode|rror"
done
log done
