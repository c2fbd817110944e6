#!/bin/bash
# Session 29 call 5 (one H200): A/B of the selection kernels in one call. base = 5eeab11; v1 = per-warp
# select histograms + quest_scores capped at 4 CTAs/SM (one wave at 128K); v2 = per-warp histograms +
# quest_scores unrolled 2 (60 registers, one wave). Tests of v1/v2, the GPU-resident 8 x 32K sparse bench,
# the 128K offloaded decode step and ncu of its selection kernels for each.
set -u
D=.dev-s29ab
for f in $D/*.xz; do xz -dkf -T0 "$f"; done; chmod +x $D/nanovllm_* $D/test_cuda_*
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$D/nanovllm_base make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null &
MK=$!
for v in v1 v2; do
  log "tests $v"; timeout 200 $D/test_cuda_$v --gtest_filter='CudaSparse*:CudaOffload.Sparse*:CudaSparseDecode*' > $OUT/test_cuda_$v.log 2>&1
  echo "rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" $OUT/test_cuda_$v.log
done
for v in base v1 v2; do
  log "resident 8x32K bench $v"; timeout 120 $D/test_cuda_$v --gtest_also_run_disabled_tests --gtest_filter='CudaSparseBench.*' 2>&1 | grep -vE "^\[|^$|Running main|Note:" | tail -8
done
wait $MK
OFF="bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --no-compare --sparse-policy quest --sparse-budget 2048 --sparse-page-size 16"
for round in 1 2; do
  for v in base v1 v2; do
    log "offload 128K $v (round $round)"; timeout 150 $D/nanovllm_$v $OFF --output-len 48 2>&1 | grep -E "decode"
  done
done
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for v in base v1 v2; do
  log "ncu $v"
  timeout 150 $NCU --cache-control none --kernel-name regex:"quest_scores|select_pages|plan_kernel" \
    --metrics gpu__time_duration.sum --csv --page raw $D/nanovllm_$v $OFF --enforce-eager --output-len 4 > $OUT/ncu_$v.csv 2> $OUT/ncu_$v.err
  echo "rc $?"
done
log done
