#!/bin/bash
# Session 29 call 6 (one H200): select_pages keeping the middle pages' keys in shared memory (few-items
# kernel), A/B in one call: head = 9351121, v3 = head + the key cache. Sparse CUDA tests of v3; the
# resident 8 x 32K sparse bench; the 128K offloaded decode step (two rounds) and ncu of its selection kernels.
set -u
D=.dev-s29c
for f in $D/*.xz; do xz -dkf -T0 "$f"; done; chmod +x $D/nanovllm_* $D/test_cuda_*
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$D/nanovllm_head make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null &
MK=$!
log "tests v3"; timeout 200 $D/test_cuda_v3 --gtest_filter='CudaSparse*:CudaOffload.Sparse*:CudaSparseDecode*:CudaVsCpu*' > $OUT/test_cuda_v3.log 2>&1
echo "rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" $OUT/test_cuda_v3.log
log "resident 8x32K bench v3"; timeout 120 $D/test_cuda_v3 --gtest_also_run_disabled_tests --gtest_filter='CudaSparseBench.*' 2>&1 | grep -vE "^\[|^$|Running main|Note:"
wait $MK
OFF="bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --no-compare --sparse-policy quest --sparse-budget 2048 --sparse-page-size 16"
for round in 1 2; do
  for v in head v3; do
    log "offload 128K $v (round $round)"; timeout 150 $D/nanovllm_$v $OFF --output-len 48 2>&1 | grep -E "decode"
  done
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for v in head v3; do
  log "ncu $v"
  timeout 150 $NCU --cache-control none --kernel-name regex:"quest_scores|select_pages|plan_kernel" \
    --metrics gpu__time_duration.sum --csv --page raw $D/nanovllm_$v $OFF --enforce-eager --output-len 4 > $OUT/ncu_$v.csv 2> $OUT/ncu_$v.err
  echo "rc $?"
done
log done
