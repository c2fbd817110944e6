#!/bin/bash
# Session 30 call 2 (one GPU): CUPTI timeline of the offloaded Quest decode step at 128K (4B YaRN shape,
# budget 2048, pages of 16): one request, then 4 at once. Kernel time per name and the GPU's idle gaps.
set -u
D=.dev-s30
for f in test_cuda libcupti.so.13; do xz -dkf -T0 "$D/$f.xz"; done; chmod +x $D/test_cuda
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -d /tmp/q4-yarn ] || { xz -dkf -T0 $D/nanovllm.xz; chmod +x $D/nanovllm; $D/nanovllm make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null; }
export NANOVLLM_STEP_TIMELINE_MODEL=/tmp/q4-yarn
for n in 1 4; do
  log "timeline, $n request(s)"
  NANOVLLM_STEP_TIMELINE_SEQS=$n timeout 240 $D/test_cuda --gtest_also_run_disabled_tests \
    --gtest_filter='CudaStepTimelineBench.DISABLED_OffloadedQuestDecode' > $OUT/timeline_$n.log 2>&1; echo "rc $?"
  grep -A40 "^one step" $OUT/timeline_$n.log | head -40
done
log done
