#!/usr/bin/env bash
# Block-scaled FP8 on the GPU machine (issue #51, docs/fp8.md): the CUDA fp8 tests and kernel micro-benchmarks,
# the HF transformers goldens of the CPU FP8 tests, and bs=1 decode latency of fp8 vs bf16 on the Qwen3-0.6B and
# Qwen3-8B shapes in one run (random weights; fp8 is the same bf16 checkpoint under --quantization fp8, quantized
# per 128 x 128 block at load). Run from the repository root on an H200 box.
#
#   scripts/bench/fp8_device.sh [BUILD_DIR]      BUILD_DIR: a CUDA build tree (default build/cuda; configured and
#                                                built here when it has no tests/test_cuda)
#
# Steps (seconds on one H200, after the build):
#   1. test_cuda --gtest_filter='CudaFp8*' with the DISABLED_ decode / prefill benchmarks            ~25
#   2. python3 scripts/hf_fp8_golden.py --out $OUT/golden (CPU torch + transformers)                 ~10
#      -> copy $OUT/golden/* into tests/data/golden, then build/cpu/tests/test_e2e --gtest_filter='*HfFp8Golden*'
#   3. make-test-model qwen3-0.6b and qwen3-8b (seed 1, in $MODELS_DIR, default /tmp; kept if present)  ~35
#   4. bench latency, bs=1 decode @1K context + prefill 8K: 0.6B bf16, 0.6B fp8, 8B bf16, 8B fp8      ~70
# Output: $OUT (default ./fp8-out): one log per step, latency_*.json, golden/; a summary at the end.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
BUILD=${1:-build/cuda}
OUT=${OUT:-./fp8-out}
MODELS=${MODELS_DIR:-/tmp}
mkdir -p "$OUT"
source "$(dirname "$0")/steps.sh"  # run, FAILED, the build when missing
NV=$BUILD/tools/nanovllm
run tests "$BUILD/tests/test_cuda" --gtest_filter='CudaFp8*' --gtest_also_run_disabled_tests
run golden python3 scripts/hf_fp8_golden.py --out "$OUT/golden"

make_model "$MODELS/q06" qwen3-0.6b
make_model "$MODELS/q8" qwen3-8b
for m in q06 q8; do
  for q in none fp8; do
    run "latency_${m}_$q" env NANOVLLM_LOG_LEVEL=info "$NV" bench latency --backend cuda --model "$MODELS/$m" \
      --quantization "$q" --context 1024 --decode-tokens 64 --prefill 8192 --json-out "$OUT/latency_${m}_$q.json"
  done
done

echo "== summary"
grep -hE "CudaFp8Bench|fp8 .* us|TFLOP/s|NMSE vs unquantized|PASSED|FAILED" "$OUT/tests.log" | head -40
for m in q06 q8; do
  for q in none fp8; do
    printf '%s %-4s ' "$m" "$q"
    grep -hE "decode bs=1|prefill [0-9]+ tokens" "$OUT/latency_${m}_$q.log" | tr '\n' ' '
    echo
  done
done
echo "fp8_device: $([ $FAILED -eq 0 ] && echo all steps passed || echo SOME STEPS FAILED) (logs in $OUT; goldens in" \
     "$OUT/golden: copy them into tests/data/golden)"
exit $FAILED
