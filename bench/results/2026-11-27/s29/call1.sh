#!/bin/bash
# Session 29 call 1 (2 GPUs): whole test_cuda on the tree with per-rank shard loads and TP + offload on
# CUDA; 8B bs=1 latency TP1/TP2 loading through the per-rank loader, with peak host memory.
set -u
D=.dev-s29
for f in nanovllm test_cuda; do xz -dkf -T0 "$D/$f.xz"; chmod +x $D/$f; done
B=$PWD/$D/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvidia-smi topo -m | head -4
$B make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 > /dev/null &
MK=$!
log test_cuda
timeout 400 $D/test_cuda > $OUT/test_cuda.log 2>&1
echo "test_cuda rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/test_cuda.log
wait $MK
for tp in 1 2 1 2; do
  log "8B latency tp$tp"
  /usr/bin/time -f "wall %e s, max rss %M KiB" timeout 60 $B bench latency --backend cuda --model /tmp/q8 --tensor-parallel-size $tp --context 1024 --decode-tokens 64 \
    --skip-prefill 2>&1 | grep -E "decode bs|rror|wall|load"
done
log done
