#!/usr/bin/env bash
# Batched offloaded sparse decode (issue 47, the "lanes" target) on the GPU machine, from the repository root:
# several offloaded requests decoding together with Quest (budget 2048, pages of 16) plan and fetch their pages in
# one launch per layer (page_cache_plan_rows / page_cache_fetch_rows), fp8 codes and scales in the same launch.
#
#   scripts/bench/lanes_check.sh [BUILD_DIR]
#     BUILD_DIR: a CUDA build tree (default build/cuda; configured and built here when it lacks tests/test_cuda or
#     tools/nanovllm; otherwise test_cuda and nanovllm are brought up to date, a no-op when they are).
#
# Steps (seconds on one H200 once built; ~170 s in all):
#   1. test_cuda: the page cache (CPU vs CUDA: batched rows with fp8 scales, the head-major scale store), the
#      fp8 page-cache fetch, the offload sparse / fp8 / concurrent tests                                     ~30
#   2. make-test-model q4-yarn (Qwen3-4B, YaRN x4 to 131072 positions) in $MODELS_DIR (kept)                  ~15
#   3. bench offload, 64K contexts, Quest 2048, pages of 16, 24 tokens: fp8 and bf16 at 1 and 4 lanes       ~120
# Output: $OUT (default ./lanes-out): one log (and JSON) per step and a summary. Targets: 4 x 128K fp8 >= 250
# output tok/s, 8 x 128K >= 350 (today at 64K: fp8 1 lane 9.06 ms/step, 4 lanes 21.05 ms/step).
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NANOVLLM_TEST_DATA=${NANOVLLM_TEST_DATA:-$PWD/tests/data}
BUILD=${1:-build/cuda}
OUT=${OUT:-./lanes-out}
MODELS=${MODELS_DIR:-/tmp}
mkdir -p "$OUT"
STEP_TAIL=10
source "$(dirname "$0")/steps.sh"  # run, FAILED, the build when missing
if [ $missing -eq 0 ]; then  # an existing tree: rebuild what this branch changed
  run build cmake --build "$BUILD" --target test_cuda nanovllm -j"$(nproc)"
fi
NV=$BUILD/tools/nanovllm

# 1. Device tests.
run tests "$BUILD/tests/test_cuda" \
  --gtest_filter='CudaPageCache.*:CudaKvFp8.PageCache*:CudaOffload.Sparse*:CudaOffload.Fp8*:CudaOffload.Concurrent*'

# 2. The checkpoint (random weights, seed 1).
if [ ! -f "$MODELS/q4-yarn/config.json" ]; then
  run make_q4_yarn "$NV" make-test-model --out "$MODELS/q4-yarn" --preset qwen3-4b --seed 1 --config-override \
    '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}'
fi

# 3. Quest over offload at 64K with N lanes decoding together.
quest() {  # quest KV_DTYPE N
  run "quest_$1_x$2" env NANOVLLM_LOG_LEVEL=info "$NV" bench offload --backend cuda --model "$MODELS/q4-yarn" \
    --context 65536 --output-len 24 --no-compare --sparse-policy quest --sparse-budget 2048 --sparse-page-size 16 \
    --concurrency "$2" --kv-cache-dtype "$1" --json-out "$OUT/quest_$1_x$2.json"
}
quest fp8 1
quest fp8 4
quest bf16 1
quest bf16 4

echo "== summary"
grep -hE "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" "$OUT/tests.log" | head -20
for s in fp8_x1 fp8_x4 bf16_x1 bf16_x4; do
  echo "-- quest_$s"
  grep -hiE "decode|ms/step|ms/token|tok/s|H2D|hit rate" "$OUT/quest_$s.log" | head -8
done
echo "lanes_check: $([ $FAILED -eq 0 ] && echo all steps passed || echo SOME STEPS FAILED) (logs in $OUT)"
exit $FAILED
