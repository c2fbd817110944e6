#!/usr/bin/env bash
# fp8 KV cache (issue 47, docs/kv_cache.md) on the GPU machine: the CUDA fp8-KV device tests, then bf16 vs fp8 in
# the same call on random-weight checkpoints. Run from the repository root on an H200 box.
#
#   scripts/bench/fp8_kv_check.sh [--resident] [BUILD_DIR]
#     BUILD_DIR: a CUDA build tree (default build/cuda; configured and built here when it lacks tests/test_cuda or
#     tools/nanovllm). --resident: steps 1, 2 (q4, q06), 5, 6 and 7 only (the GPU-resident decode; ~150 s).
#
# Steps (seconds on one H200 after the build; ~250 s in all):
#   1. test_cuda: CudaKvFp8.*, the attention / dual-chunk / sparse / page-cache / offload tests it touches   ~70
#   2. make-test-model q4-yarn (Qwen3-4B, YaRN x4 to 131072 positions), q4, q06 in $MODELS_DIR (kept)        ~30
#   3. dense offload decode at 128K (bench offload, one request of 131000 tokens, 8 tokens): bf16, fp8      ~70
#   4. Quest over offload at 128K, budget 2048, pages of 16: bf16, fp8                                      ~60
#   5. GPU-resident decode at 32K (bench latency, 8 x 32768, --skip-prefill, 4B shape): bf16, fp8           ~20
#   6. offline throughput, 0.6B shape (bench throughput, its default workload): bf16, fp8                   ~25
#   7. the decode attention kernel alone, 8 x 32K, 4B heads (CudaKvFp8Bench.DISABLED_Decode32K): bf16, fp8  ~15
# Output: $OUT (default ./fp8-kv-out): one log per step and a summary at the end. Targets (issue 47): dense offload
# fp8 <= 0.55x bf16; Quest over offload <= 7 ms/token; resident decode attention >= 1.7x; throughput >= bf16.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NANOVLLM_TEST_DATA=${NANOVLLM_TEST_DATA:-$PWD/tests/data}
RESIDENT=0
if [ "${1:-}" = --resident ]; then RESIDENT=1; shift; fi
BUILD=${1:-build/cuda}
OUT=${OUT:-./fp8-kv-out}
MODELS=${MODELS_DIR:-/tmp}
mkdir -p "$OUT"
STEP_TAIL=12
source "$(dirname "$0")/steps.sh"  # run, FAILED, the build when missing
NV=$BUILD/tools/nanovllm

# 1. Device tests: the fp8 ones, and the existing tests of every kernel and path the change touched (bf16 caches).
run tests "$BUILD/tests/test_cuda" --gtest_filter='CudaKvFp8*:CudaAttention*:CudaDualChunk*:CudaSparse*:CudaBlockSparse*:'\
'CudaPageCache*:CudaOffload*:CudaPrologue*:CudaDecodePdl*:CudaVsCpu*'

# 2. Checkpoints (random weights, seed 1).
mk() {  # mk NAME PRESET [CONFIG_OVERRIDE]
  [ -f "$MODELS/$1/config.json" ] && return 0
  if [ $# -ge 3 ]; then
    run "make_$1" "$NV" make-test-model --out "$MODELS/$1" --preset "$2" --config-override "$3" --seed 1
  else
    run "make_$1" "$NV" make-test-model --out "$MODELS/$1" --preset "$2" --seed 1
  fi
}
[ $RESIDENT -eq 1 ] || mk q4-yarn qwen3-4b '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}'
mk q4 qwen3-4b
mk q06 qwen3-0.6b

for kv in auto fp8; do
  [ $RESIDENT -eq 1 ] && continue
  # 3. Dense offload decode at 128K (the [off] row of bench/README.md, one context, 8 tokens).
  run "offload_dense_$kv" "$NV" bench offload --backend cuda --model "$MODELS/q4-yarn" --context 131000 \
    --output-len 8 --no-compare --kv-cache-dtype "$kv" --json-out "$OUT/offload_dense_$kv.json"
  # 4. Quest over offload at 128K, budget 2048, pages of 16 (the [osparse] row).
  run "offload_quest_$kv" "$NV" bench offload --backend cuda --model "$MODELS/q4-yarn" --context 131000 \
    --output-len 48 --no-compare --sparse-policy quest --sparse-budget 2048 --sparse-page-size 16 \
    --kv-cache-dtype "$kv" --json-out "$OUT/offload_quest_$kv.json"
done
for kv in auto fp8; do
  # 5. GPU-resident decode at 32K: 8 sequences of 32768 tokens (the [sparse] row's dense step).
  run "resident_32k_$kv" env NANOVLLM_LOG_LEVEL=info "$NV" bench latency --backend cuda --model "$MODELS/q4" \
    --batch 8 --context 32768 --decode-tokens 32 --skip-prefill --kv-cache-dtype "$kv" \
    --json-out "$OUT/resident_32k_$kv.json"
  # 6. Offline throughput on the 0.6B shape (the [thr] row).
  run "throughput_$kv" env NANOVLLM_LOG_LEVEL=info "$NV" bench throughput --backend cuda --model "$MODELS/q06" \
    --kv-cache-dtype "$kv" --json-out "$OUT/throughput_$kv.json"
done

# 7. The decode attention kernel alone, bf16 vs fp8 (the resident step's attention, one layer).
run kernel_decode32k "$BUILD/tests/test_cuda" --gtest_also_run_disabled_tests --gtest_filter='CudaKvFp8Bench.*'

echo "== summary"
grep -hE "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" "$OUT/tests.log" | head -20
for kv in auto fp8; do
  echo "-- kv_cache_dtype $kv"
  if [ $RESIDENT -eq 0 ]; then
    grep -hE "KV per token|decode|ms/token|peak GPU memory|hit rate" "$OUT/offload_dense_$kv.log" | head -6
    grep -hE "decode|ms/token|hit rate" "$OUT/offload_quest_$kv.log" | head -4
  fi
  grep -hE "decode|step" "$OUT/resident_32k_$kv.log" | head -3
  grep -hE "tok/s|throughput" "$OUT/throughput_$kv.log" | head -3
done
grep -hE "us/call|fp8|bf16" "$OUT/kernel_decode32k.log" | grep -v "^\[" | head -8
echo "fp8_kv_check: $([ $FAILED -eq 0 ] && echo all steps passed || echo SOME STEPS FAILED) (logs in $OUT)"
exit $FAILED
