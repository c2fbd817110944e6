#!/bin/bash
# Issue 34, 2-GPU machine: the peer all-reduce and TP tests, the CUPTI step timeline of an 8B bs=1 decode
# step at TP1 and TP2 (GPU 0), and 8B bs=1 latency TP2 for binaries A (peer all-reduce without PDL) and
# B (this tree: with PDL), alternating. D holds nanovllm.xz (B), nanovllm-A.xz, test_cuda.xz, libcupti.so.13.xz.
set -u
D=${1:-.dev-tp2B}
for f in nanovllm nanovllm-A test_cuda libcupti.so.13; do xz -dkf -T0 "$D/$f.xz"; done
chmod +x $D/nanovllm $D/nanovllm-A $D/test_cuda
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$D/nanovllm make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 > /dev/null &
MK=$!
log "CUDA tests: peer all-reduce, tensor parallel"
timeout 120 $D/test_cuda --gtest_filter='CudaPeerAllReduce.*:CudaTensorParallel.*' > $OUT/test_cuda_peer.log 2>&1
echo "rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[       OK|^\[  FAILED|Failure|mismatch|tokens before" $OUT/test_cuda_peer.log | head -20
wait $MK
for tp in 1 2; do
  log "8B step timeline tp$tp"
  NANOVLLM_STEP_TIMELINE_MODEL=/tmp/q8 NANOVLLM_STEP_TIMELINE_TP=$tp timeout 120 $D/test_cuda --gtest_also_run_disabled_tests \
    --gtest_filter='CudaStepTimelineBench.*' > $OUT/timeline_tp$tp.log 2>&1; echo "rc $?"
  sed -n '/one step:/,$p' $OUT/timeline_tp$tp.log | head -30
done
for b in A B A B; do
  [ $b = A ] && N=$D/nanovllm-A || N=$D/nanovllm
  log "8B latency tp2 binary $b"
  timeout 60 $N bench latency --backend cuda --model /tmp/q8 --tensor-parallel-size 2 --context 1024 --decode-tokens 64 \
    --skip-prefill 2>&1 | grep -E "decode bs|rror"
done
log done
