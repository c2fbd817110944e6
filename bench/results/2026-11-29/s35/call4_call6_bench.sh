#!/usr/bin/env bash
# s35 call 3: the coalesced last-query kernel: estimator/DCA device tests, 256K and 1M avgpool prefill over offload.
set -uo pipefail
cd .carry && tar xJf bin.tar.xz && cd ..
BIN=.carry/nanovllm; export NANOVLLM_TEST_DATA=$PWD/tests/data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/card.txt
echo "== tests $(date +%T)"
.carry/test_cuda --gtest_filter='CudaPatternEstimators*:CudaDualChunk*:CudaSparse*:CudaBlockSparse*:CudaOffload*:CudaXAttention*:CudaFlexPrefill*:CudaVerticalSlash*' > $OUT/tests.log 2>&1; echo "rc=$?"
grep -E '^\[  (PASSED|FAILED)|tests ran' $OUT/tests.log | head
Q=/tmp/q25
[ -d $Q ] || $BIN make-test-model --out $Q --preset qwen2.5-7b-1m --seed 1 > /dev/null
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1 --sparse-policy quest --sparse-budget 2048)
echo "== 256k $(date +%T)"
$BIN bench offload --backend cuda --model $Q --context 262144 --output-len 4 --no-compare "${SP[@]}" 2>&1 | tee $OUT/256k.log | grep -E 'prefill'
echo "== 1m $(date +%T)"
$BIN bench offload --backend cuda --model $Q --context 1000000 --output-len 16 --no-compare "${SP[@]}" --json-out $OUT/offload-1m.json 2>&1 | tee $OUT/offload-1m.log | grep -E 'prefill|hit rate'
echo "== done $(date +%T)"
