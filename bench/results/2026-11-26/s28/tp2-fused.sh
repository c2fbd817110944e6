#!/bin/bash
# Issue 34, 2-GPU machine: tests of the peer all-reduce (plain and fused with the residual add + RMSNorm)
# and of TP; 8B bs=1 latency TP1, then TP2 with this tree (fused, PDL) against binary A (plain peer
# all-reduce, no PDL), alternating; throughput TP1/TP2; the TP2 step timeline; tied-8B TP2-vs-TP1 agreement.
# D holds nanovllm.xz, nanovllm-A.xz, test_cuda.xz, libcupti.so.13.xz.
set -u
D=${1:-.dev-tp2C}
for f in nanovllm nanovllm-A test_cuda libcupti.so.13; do xz -dkf -T0 "$D/$f.xz"; done
chmod +x $D/nanovllm $D/nanovllm-A $D/test_cuda
B=$PWD/$D/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 > /dev/null &
MK=$!
log "CUDA tests: peer all-reduce, tensor parallel, CUDA vs CPU"
timeout 150 $D/test_cuda --gtest_filter='CudaPeerAllReduce.*:CudaTensorParallel.*:CudaVsCpu.*' > $OUT/test_cuda_fused.log 2>&1
echo "rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[       OK|^\[  FAILED|Failure|differ|mismatch|tokens before" $OUT/test_cuda_fused.log | head -20
wait $MK
lat() { timeout 60 $1 bench latency --backend cuda --model /tmp/q8 --tensor-parallel-size $2 --context 1024 --decode-tokens 64 \
    --skip-prefill 2>&1 | grep -E "decode bs|rror"; }
log "8B latency tp1"; lat $B 1
for b in new A new A; do
  [ $b = A ] && N=$D/nanovllm-A || N=$B
  log "8B latency tp2 binary $b"; lat $N 2
done
for tp in 2 1; do
  log "8B throughput tp$tp"
  timeout 120 $B bench throughput --backend cuda --model /tmp/q8 --tensor-parallel-size $tp 2>&1 | tail -3
done
log "8B step timeline tp2"
NANOVLLM_STEP_TIMELINE_MODEL=/tmp/q8 NANOVLLM_STEP_TIMELINE_TP=2 timeout 120 $D/test_cuda --gtest_also_run_disabled_tests \
  --gtest_filter='CudaStepTimelineBench.*' > $OUT/timeline_tp2.log 2>&1; echo "rc $?"
sed -n '/one step:/,$p' $OUT/timeline_tp2.log | head -14
$B make-test-model --out /tmp/q8t --preset qwen3-8b --seed 1 --config-override '{"tie_word_embeddings": true}' > /dev/null
log "tied 8B agreement TP2 vs TP1 (16 prompts x 64 steps)"
timeout 200 python3 scripts/tp_agreement.py --nanovllm $B --model /tmp/q8t --tp 2 --prompts 16 --steps 64 \
  --json-out $OUT/tp_agreement_8b_tied.json; echo "rc $?"
log done
