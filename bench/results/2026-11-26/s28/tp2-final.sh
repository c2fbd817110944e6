#!/bin/bash
# Issue 34, 2-GPU machine, the shipped tree (fused peer all-reduce): peer/TP tests, 8B bs=1 latency TP1 and
# TP2 alternating, offline throughput TP2 and TP1, in one call. D holds nanovllm.xz, test_cuda.xz.
set -u
D=${1:-.dev-final}
for f in nanovllm test_cuda; do xz -dkf -T0 "$D/$f.xz"; chmod +x $D/$f; done
B=$PWD/$D/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 > /dev/null &
MK=$!
timeout 60 $D/test_cuda --gtest_filter='CudaPeerAllReduce.*:CudaTensorParallel.*' > $OUT/test_cuda_final.log 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" $OUT/test_cuda_final.log
wait $MK
for tp in 1 2 1 2; do
  log "8B latency tp$tp"
  timeout 40 $B bench latency --backend cuda --model /tmp/q8 --tensor-parallel-size $tp --context 1024 --decode-tokens 64 \
    --skip-prefill 2>&1 | grep -E "decode bs|rror"
done
for tp in 2 1; do
  log "8B throughput tp$tp"
  timeout 60 $B bench throughput --backend cuda --model /tmp/q8 --tensor-parallel-size $tp 2>&1 | tail -3
done
log done
