#!/bin/bash
# Issue 34 hypothesis: CUDA lazy module loading deadlocks the NCCL ranks (one thread per GPU in one process): a first
# launch loads its module under a process-wide lock and waits for its GPU, which spins in an all-reduce until the
# other rank's thread - blocked on that lock - launches. Test: TP2 with CUDA_MODULE_LOADING=EAGER, then lazy.
set -u
D=.dev-tp2
for f in nanovllm test_cuda; do xz -dkf -T0 "$D/$f.xz" && chmod +x "$D/$f"; done
B=$D/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; env | grep -E "NVLS|MULTICAST|MODULE_LOADING"
log "TP test, EAGER"
CUDA_MODULE_LOADING=EAGER timeout 90 $D/test_cuda --gtest_also_run_disabled_tests --gtest_filter='CudaTensorParallel.*' 2>&1 | tail -6
log "TP test, lazy (default)"
timeout 45 $D/test_cuda --gtest_also_run_disabled_tests --gtest_filter='CudaTensorParallel.*' 2>&1 | tail -4; echo "rc ${PIPESTATUS[0]}"
log "model"
$B make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 > /dev/null
export CUDA_MODULE_LOADING=EAGER
for tp in 1 2; do
  log "latency q8 tp$tp (EAGER)"
  timeout 80 $B bench latency --backend cuda --model /tmp/q8 --tensor-parallel-size $tp --context 1024 --decode-tokens 64 \
    --skip-prefill --json-out "$OUT/lat-q8-tp$tp.json" > "$OUT/lat-q8-tp$tp.log" 2>&1
  echo "rc $?"; grep -iE "decode|ms/|error" "$OUT/lat-q8-tp$tp.log" | tail -4
done
for tp in 1 2; do
  log "throughput q8 tp$tp (EAGER)"
  timeout 100 $B bench throughput --backend cuda --model /tmp/q8 --tensor-parallel-size $tp \
    --json-out "$OUT/thr-q8-tp$tp.json" > "$OUT/thr-q8-tp$tp.log" 2>&1
  echo "rc $?"; grep -E "throughput|error" "$OUT/thr-q8-tp$tp.log" | tail -3
done
log done
