#!/usr/bin/env bash
# fp8 KV cache with sparse prefill on CUDA (issue 47, docs/kv_cache.md "Sparse prefill"): the device tests, then the
# long-context configuration (AvgPool budget 4096 + layer 0 dense) with bf16 and fp8 caches. Run from the repository
# root on an H200 box.
#
#   scripts/bench/fp8_sparse_prefill_check.sh [BUILD_DIR]
#     BUILD_DIR: a CUDA build tree (default build/cuda; configured and built here when it lacks tests/test_cuda or
#     tools/nanovllm).
#
# Steps (seconds on one H200 after the build; ~170 s in all, each step bounded by `timeout`):
#   1. test_cuda: the fp8 sparse prefill tests (estimators, block-sparse kernel, engine vs CPU) and the tests of the
#      kernels they changed on bf16 / dense fp8 caches                                                         ~40
#   2. eval ruler on the 128K retrieval fixture, 8 samples, AvgPool budget 4096 + layer 0 dense: auto, fp8    2 x ~15
#   3. make-test-model q4-yarn (Qwen3-4B, YaRN x4 to 131072 positions) in $MODELS_DIR (kept)                   ~20
#   4. bench offload at 131000 tokens, AvgPool budget 4096 + layer 0 dense, Quest 2048: auto, fp8 (prefill) 2 x ~35
# Output: $OUT (default ./fp8-sparse-prefill-out): one log per step and a summary at the end (RULER scores and
# densities, the offload runs' prefill times and KV bytes per token).
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NANOVLLM_TEST_DATA=${NANOVLLM_TEST_DATA:-$PWD/tests/data}
BUILD=${1:-build/cuda}
OUT=${OUT:-./fp8-sparse-prefill-out}
MODELS=${MODELS_DIR:-/tmp}
mkdir -p "$OUT"
STEP_TAIL=12
source "$(dirname "$0")/steps.sh"  # run, FAILED, the build when missing
NV=$BUILD/tools/nanovllm
SPARSE_PREFILL=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)

# 1. Device tests: the new fp8 ones (CudaPatternEstimatorsByKvDtype.*/Fp8, CudaBlockSparsePrefill.Fp8*,
# CudaKvFp8SparsePrefill.*), the bf16 estimator and block-sparse tests (same kernels, new templates), the dense fp8
# tests (the wgmma kernel's fp8 path is shared) and the runner's sparse prefill on CUDA.
run tests timeout 300 "$BUILD/tests/test_cuda" --gtest_filter='CudaPatternEstimators*:CudaBlockSparsePrefill*:'\
'Policies/CudaKvFp8SparsePrefill*:CudaKvFp8.*:CudaOffload.Sparse*'

# 2. RULER on the 128K retrieval fixture (one sequence at a time: every chunk goes sparse), bf16 then fp8.
for kv in auto fp8; do
  run "ruler_$kv" timeout 90 "$NV" eval ruler --backend cuda --model tests/data/retrieval-model-128k --context 131072 \
    --samples 8 --tasks all --skip-too-short --max-num-seqs 1 "${SPARSE_PREFILL[@]}" --kv-cache-dtype "$kv"
done

# 3. The 131K checkpoint (random weights, seed 1).
if [ ! -f "$MODELS/q4-yarn/config.json" ]; then
  run make_q4_yarn timeout 120 "$NV" make-test-model --out "$MODELS/q4-yarn" --preset qwen3-4b --seed 1 \
    --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}'
fi

# 4. The long-context configuration over offload: sparse prefill + Quest decode, bf16 then fp8 (prefill time).
for kv in auto fp8; do
  run "offload_$kv" timeout 90 "$NV" bench offload --backend cuda --model "$MODELS/q4-yarn" --context 131000 \
    --output-len 8 --no-compare "${SPARSE_PREFILL[@]}" --sparse-policy quest --sparse-budget 2048 \
    --kv-cache-dtype "$kv" --json-out "$OUT/offload_$kv.json"
done

echo "== summary"
grep -hE "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" "$OUT/tests.log" | head -20
for kv in auto fp8; do
  echo "-- kv_cache_dtype $kv"
  grep -hiE "score|density|average|total" "$OUT/ruler_$kv.log" | tail -6
  grep -hiE "prefill|KV per token|decode|ms/token|peak" "$OUT/offload_$kv.log" | head -8
done
exit $FAILED
