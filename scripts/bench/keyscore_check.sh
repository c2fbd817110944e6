#!/usr/bin/env bash
# The keyscore policy's tensor-core page scores (issue 46) on the GPU machine: the int4 device tests and the scores
# bench (one 128K sequence and 8 x 32K, beside Quest), then the decode step at 8 x 32K with Quest and with keyscore.
# Run from the repository root on an H200 box.
#
#   [PART=all|tests|latency] scripts/bench/keyscore_check.sh [BUILD_DIR]
#     BUILD_DIR: a CUDA build tree (default build/cuda; configured and built here when it lacks a binary the part
#     needs). PART=tests needs only tests/test_cuda (step 1), PART=latency only tools/nanovllm (steps 2-3): the two
#     binaries together (~75 MB stripped) are more than one carried run takes, so a carried build runs in two parts.
#
# Steps (seconds on one H200 after the build; ~70 s in all):
#   1. test_cuda CudaInt4Keys*: bit-identical update, scores vs the CPU (11 settings), the DISABLED_ bench   ~15
#   2. make-test-model q4 (Qwen3-4B shape, random weights, seed 1) in $MODELS_DIR (kept)                    ~15
#   3. bench latency, 8 x 32768, --skip-prefill, 32 decode tokens, budget 2048: quest, keyscore           ~2 x 20
# Output: $OUT (default ./keyscore-out): one log per step and a summary. Targets: int4_key_scores <= 25 us at 128K
# (was 87.1 us; quest_scores 18.0 us); the keyscore decode step at 8 x 32K near Quest's (was 10.46 vs 5.99 ms).
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NANOVLLM_TEST_DATA=${NANOVLLM_TEST_DATA:-$PWD/tests/data}
BUILD=${1:-build/cuda}
OUT=${OUT:-./keyscore-out}
MODELS=${MODELS_DIR:-/tmp}
mkdir -p "$OUT"
STEP_TAIL=20
PART=${PART:-all}
NV=$BUILD/tools/nanovllm
case $PART in  # the binaries this part runs: steps.sh builds when one is missing
  tests) NEEDS=tests/test_cuda ;;
  latency) NEEDS=tools/nanovllm ;;
  *) NEEDS="tests/test_cuda tools/nanovllm" ;;
esac
source "$(dirname "$0")/steps.sh"  # run, FAILED, the build when missing

if [ "$PART" != latency ]; then
  # 1. Device tests and the scores bench.
  run tests "$BUILD/tests/test_cuda" --gtest_also_run_disabled_tests --gtest_filter='CudaInt4Keys*'
fi

if [ "$PART" != tests ]; then
  # 2. Checkpoint (random weights, seed 1).
  [ -f "$MODELS/q4/config.json" ] || run make_q4 "$NV" make-test-model --out "$MODELS/q4" --preset qwen3-4b --seed 1
  # 3. GPU-resident decode at 32K with each sparse policy.
  for policy in quest keyscore; do
    run "latency_$policy" env NANOVLLM_LOG_LEVEL=info "$NV" bench latency --backend cuda --model "$MODELS/q4" \
      --batch 8 --context 32768 --decode-tokens 32 --skip-prefill --sparse-policy "$policy" --sparse-budget 2048 \
      --json-out "$OUT/latency_$policy.json"
  done
fi

echo "== summary"
[ -f "$OUT/tests.log" ] &&
  grep -hE "^\[  (PASSED|FAILED) |FAILED  \]|tests ran|int4_key_scores|quest_scores|keys, Hq" "$OUT/tests.log" | head -20
for policy in quest keyscore; do
  [ -f "$OUT/latency_$policy.log" ] || continue
  echo "-- $policy"
  grep -hE "decode|step" "$OUT/latency_$policy.log" | head -3
done
echo "keyscore_check: $([ $FAILED -eq 0 ] && echo all steps passed || echo SOME STEPS FAILED) (logs in $OUT)"
exit $FAILED
