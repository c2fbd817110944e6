#!/bin/bash
# Session 29 call 7 (2 GPUs): the whole test_cuda on the stop's final tree (b96926a).
set -u
D=.dev-s29
for f in nanovllm test_cuda; do xz -dkf -T0 "$D/$f.xz"; chmod +x $D/$f; done
export NANOVLLM_TEST_DATA=$PWD/tests/data
echo "=== $(date +%T) cards"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 500 $D/test_cuda > $OUT/test_cuda.log 2>&1
echo "test_cuda rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/test_cuda.log
echo "=== $(date +%T) done"
