#!/bin/bash
# Issue 34 on a 2-GPU machine, one call: the peer all-reduce and tensor-parallel CUDA tests, the peer
# kernel vs NCCL timing, then on random Qwen3-8B-shaped checkpoints bs=1 decode latency (TP1, TP2 twice),
# offline throughput (TP1, TP2) and TP2-vs-TP1 greedy agreement (untied, and tied = peaked logits).
# D holds nanovllm.xz and test_cuda.xz built from this tree.
#   bash bench/results/2026-11-26/s28/tp2-peer.sh D > $OUT/tp2-peer.log 2>&1
set -u
D=${1:-.dev-tp2}
for f in nanovllm test_cuda; do xz -dkf -T0 "$D/$f.xz" && chmod +x "$D/$f"; done
B=$PWD/$D/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 > /dev/null &
MK=$!
log "CUDA tests: peer all-reduce, tensor parallel"
timeout 120 $D/test_cuda --gtest_filter='CudaPeerAllReduce.*:CudaTensorParallel.*' > $OUT/test_cuda_peer.log 2>&1
echo "rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[       OK|^\[  FAILED|Failure|mismatch|tokens before" $OUT/test_cuda_peer.log | head -20
log "peer vs NCCL timing"
timeout 120 $D/test_cuda --gtest_also_run_disabled_tests --gtest_filter='CudaPeerAllReduceBench.*' 2>&1 | grep -E "all-reduce|OK|FAIL"
wait $MK
for tp in 1 2 2; do
  log "8B latency tp$tp"
  timeout 60 $B bench latency --backend cuda --model /tmp/q8 --tensor-parallel-size $tp --context 1024 --decode-tokens 64 \
    --skip-prefill 2>&1 | grep -E "decode bs|rror"; echo "rc ${PIPESTATUS[0]}"
done
for tp in 1 2; do
  log "8B throughput tp$tp"
  timeout 120 $B bench throughput --backend cuda --model /tmp/q8 --tensor-parallel-size $tp 2>&1 | tail -3; echo "rc ${PIPESTATUS[0]}"
done
log "8B agreement TP2 vs TP1 (16 prompts x 64 steps)"
timeout 200 python3 scripts/tp_agreement.py --nanovllm $B --model /tmp/q8 --tp 2 --prompts 16 --steps 64 \
  --json-out $OUT/tp_agreement_8b.json; echo "rc $?"
$B make-test-model --out /tmp/q8t --preset qwen3-8b --seed 1 --config-override '{"tie_word_embeddings": true}' > /dev/null
log "tied 8B agreement TP2 vs TP1 (16 prompts x 64 steps)"
timeout 200 python3 scripts/tp_agreement.py --nanovllm $B --model /tmp/q8t --tp 2 --prompts 16 --steps 64 \
  --json-out $OUT/tp_agreement_8b_tied.json; echo "rc $?"
log done
