#!/bin/bash
# Issue 34 fix check: decode graphs skip the per-rank linear tuning under tensor parallel (decode_graphs.h).
set -u
D=${1:-.dev-tp2}  # holds nanovllm.xz and test_cuda.xz built with the refusal in EngineConfig::validate lifted
for f in nanovllm test_cuda; do xz -dkf -T0 "$D/$f.xz" && chmod +x "$D/$f"; done
B=$PWD/$D/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name --format=csv,noheader
$B make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 > /dev/null &
MK=$!
log "TP test"
timeout 40 $D/test_cuda --gtest_filter='CudaTensorParallel.*' 2>&1 | grep -E "OK|FAILED|PASSED|Failure" | head
wait $MK
for tp in 1 2 2; do
  log "8B latency tp$tp"
  timeout 40 $B bench latency --backend cuda --model /tmp/q8 --tensor-parallel-size $tp --context 1024 --decode-tokens 64 \
    --skip-prefill 2>&1 | grep -E "decode bs|rror"; echo "rc ${PIPESTATUS[0]}"
done
log done
