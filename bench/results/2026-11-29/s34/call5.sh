#!/usr/bin/env bash
# Session 34: DCA sparse decode split over the keys (split-KV). Device tests, then DCA vs plain RoPE at 256K over
# offload (the 1M record's settings), then the 1M DCA run.
set -uo pipefail
B=${B:-.carry/dca/build}; BIN=$B/tools/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data
stage() { echo "== $1 ($(date +%T))"; }
stage tests
$B/tests/test_cuda --gtest_filter='CudaDualChunkSparse.*:CudaDualChunk.*:CudaSparse.*' > $OUT/tests.log 2>&1; echo "rc=$?"
grep -E '^\[  (PASSED|FAILED)|Failure|terminate' $OUT/tests.log | head
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1 --sparse-policy quest --sparse-budget 2048)
stage 256k
Q=/tmp/q25; P=/tmp/q25-plain
$BIN make-test-model --out $Q --preset qwen2.5-7b-1m --seed 1 > /dev/null
mkdir -p $P; for f in $Q/*; do [ "$(basename $f)" = config.json ] || ln -s $f $P/; done
python3 -c "
import json; c=json.load(open('$Q/config.json')); c.pop('dual_chunk_attention_config'); json.dump(c, open('$P/config.json','w'))"
for m in $Q $P; do
  $BIN bench offload --backend cuda --model $m --context 262144 --output-len 16 --no-compare "${SP[@]}" 2>&1 | grep -E 'prefill' | tee -a $OUT/256k.log
done
stage 1m
$BIN bench offload --backend cuda --model $Q --context 1000000 --output-len 16 --no-compare "${SP[@]}" --json-out $OUT/offload-1m.json 2>&1 | tee $OUT/offload-1m.log | grep -E 'prefill|hit rate'
stage done
