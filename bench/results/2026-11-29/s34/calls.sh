#!/usr/bin/env bash
# Session 34 (2026-11-29): the scripts of its device calls, verbatim, one section per former file under
# "# ## <its path> {#id}" (the separate files: git show f72d536:<its path>). Not one script: run one section
# from the repository root with
#   bash bench/results/2026-11-29/s34/calls.sh ID [ARGS...]
# (no ID lists them). The section runs as its own bash script with $0 = this file, so `dirname "$0"` is the
# folder it was written in.
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## bench/results/2026-11-29/s34/call3.sh {#call3}
#!/usr/bin/env bash
# Session 34, call 3 (H200): the fixed engine test, sparser vertical-slash and avgpool on the DCA retrieval fixture at
# 64K/128K, and DCA vs plain RoPE at 256K over offload with the 1M record's sparse settings. B: a carried release build.
set -uo pipefail
B=${B:-.carry/dca/build}; BIN=$B/tools/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data
stage() { echo "== $1 ($(date +%T))"; }
stage tests
$B/tests/test_cuda --gtest_filter='CudaDualChunkSparse.*' > $OUT/tests.log 2>&1; grep -E '^\[  (PASSED|FAILED)' $OUT/tests.log
stage ruler
MODEL=/tmp/fixture-dca; rm -rf $MODEL; mkdir -p $MODEL
for f in $PWD/tests/data/retrieval-model/*; do [ "$(basename $f)" = config.json ] || ln -s $f $MODEL/; done
python3 - $PWD/tests/data/retrieval-model/config.json $MODEL/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["max_position_embeddings"] = 262144
c["dual_chunk_attention_config"] = {"chunk_size": 16384, "local_size": 1024, "original_max_position_embeddings": 16384}
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
EVAL=(eval ruler --model $MODEL --context 65536,131072 --samples 8 --tasks niah_single_1,niah_single_2,niah_multikey_1 --skip-too-short --max-num-seqs 1)
$BIN "${EVAL[@]}" --sparse-prefill-policy minference --sparse-prefill-threshold 0.1 --json-out $OUT/minf01.json > $OUT/minf01.log 2>&1
$BIN "${EVAL[@]}" --sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1 --json-out $OUT/avgpool.json > $OUT/avgpool.log 2>&1
$BIN "${EVAL[@]}" --sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1 --enable-cpu-offload --offload-min-tokens 1 --sparse-policy quest --sparse-budget 2048 --json-out $OUT/avgpool_off_quest.json > $OUT/avgpool_off_quest.log 2>&1
stage 256k
Q=/tmp/q25; P=/tmp/q25-plain
[ -f $Q/config.json ] || $BIN make-test-model --out $Q --preset qwen2.5-7b-1m --seed 1 > /dev/null
rm -rf $P; mkdir -p $P; for f in $Q/*; do [ "$(basename $f)" = config.json ] || ln -s $f $P/; done
python3 -c "
import json; c=json.load(open('$Q/config.json')); c.pop('dual_chunk_attention_config'); json.dump(c, open('$P/config.json','w'))"
for m in $Q $P; do
  $BIN bench offload --backend cuda --model $m --context 262144 --output-len 16 --no-compare \
    --sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1 \
    --sparse-policy quest --sparse-budget 2048 2>&1 | grep -E 'prefill|hit rate' | tee -a $OUT/256k.log
done

# ## bench/results/2026-11-29/s34/call5.sh {#call5}
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
