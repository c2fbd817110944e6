#!/usr/bin/env bash
# s35 call 7: the whole CUDA suite on the final tree (cuBLASLt opened at first use), then bs=1 decode and throughput.
set -uo pipefail
cd .carry && tar xJf bin.tar.xz && cd ..
BIN=.carry/nanovllm; export NANOVLLM_TEST_DATA=$PWD/tests/data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/card.txt
echo "== startup $(date +%T)"; /usr/bin/time -f "nanovllm --version %e s" $BIN --version
echo "== test_cuda $(date +%T)"
timeout 420 .carry/test_cuda > $OUT/test_cuda_full.log 2>&1; echo "rc=$?"
grep -E '^\[  (PASSED|FAILED|SKIPPED)  \] [0-9]|^\[  FAILED' $OUT/test_cuda_full.log | head -20
echo "== bench $(date +%T)"
$BIN make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 > /dev/null
$BIN bench latency --backend cuda --model /tmp/q06 --context 1024 --decode-tokens 64 --prefill 1024 2>&1 | tail -4 | tee $OUT/lat06.log
$BIN bench throughput --backend cuda --model /tmp/q06 2>&1 | tail -3 | tee $OUT/thr06.log
echo "== done $(date +%T)"
