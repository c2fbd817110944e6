#!/bin/bash
# Session 29 call 4 (one H200): select_pages with warp-aggregated histogram atomics. Sparse CUDA tests, the
# 128K offloaded Quest decode step, ncu of its selection kernels, and a full ncu section set of one
# quest_scores launch of the 128K sequence.
set -u
D=.dev-s29
for f in nanovllm test_cuda; do xz -dkf -T0 "$D/$f.xz"; chmod +x $D/$f; done
B=$PWD/$D/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null &
MK=$!
log tests; timeout 200 $D/test_cuda --gtest_filter='CudaSparse*:CudaOffload.Sparse*:CudaSparseDecode*' > $OUT/test_cuda.log 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" $OUT/test_cuda.log
wait $MK
OFF="bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --no-compare --sparse-policy quest --sparse-budget 2048"
log "quest 2048, pages 16"; timeout 150 $B $OFF --output-len 48 --sparse-page-size 16 2>&1 | grep -E "hit rate|decode"
log "quest 2048, pages 32"; timeout 150 $B $OFF --output-len 48 --sparse-page-size 32 2>&1 | grep -E "hit rate|decode"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
log "ncu selection kernels"
timeout 200 $NCU --cache-control none --kernel-name regex:"quest_scores|select_pages|plan_kernel|fetch_kernel" \
  --metrics gpu__time_duration.sum --csv --page raw $B $OFF --enforce-eager --output-len 4 --sparse-page-size 16 > $OUT/ncu_sel.csv 2> $OUT/ncu_sel.err
echo "ncu rc $?"
log "ncu full, one quest_scores launch of the 128K sequence"
timeout 200 $NCU --cache-control none --set full --kernel-name regex:"quest_scores" --launch-skip 150 --launch-count 1 \
  $B $OFF --enforce-eager --output-len 4 --sparse-page-size 16 > $OUT/ncu_scores_full.txt 2>&1
echo "ncu rc $?"
log done
