#!/bin/bash
# Session 30 call 1 (one GPU): issue 30's batched offloaded decode. CUDA offload tests (the new concurrent
# test included), then the 128K Qwen3-4B YaRN shape with Quest budget 2048 (pages of 16): one request, and
# 4 concurrent requests (offload max_num_seqs 4), default hot-page cache and a 32K-token one.
set -u
D=.dev-s30
for f in nanovllm test_cuda; do xz -dkf -T0 "$D/$f.xz"; chmod +x $D/$f; done
B=$PWD/$D/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; free -g | head -2
$B make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null &
MK=$!
log tests
timeout 200 $D/test_cuda --gtest_filter='CudaOffload.*Sparse*:CudaOffload.Concurrent*' > $OUT/test_cuda.log 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tokens equal" $OUT/test_cuda.log
wait $MK
OFF="bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --no-compare --sparse-policy quest --sparse-budget 2048 --sparse-page-size 16 --output-len 48"
log "1 request"; timeout 120 $B $OFF --json-out $OUT/c1.json 2>&1 | grep -E "context|peak|rror"
log "4 requests"; timeout 200 $B $OFF --concurrency 4 --json-out $OUT/c4.json 2>&1 | grep -E "context|peak|rror"
log "4 requests, 32K cache"; timeout 200 $B $OFF --concurrency 4 --num-kv-buffers 2 --sparse-gpu-cache-tokens 32768 --json-out $OUT/c4_cache32k.json 2>&1 | grep -E "context|peak|rror"
log done
