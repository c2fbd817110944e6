#!/usr/bin/env bash
# The fp8 decode GEMV (issue #51, docs/fp8.md): the bulk-copy ring kernel (fp8_gemv_bulk.cu) against the register-fed
# one (fp8_gemv.cu) on the GPU machine in one run: the CUDA fp8 GEMV tests (every kernel and launch shape against
# the dequantized CPU reference, odd shapes, refusals; the engine against the CPU backend), the decode-shape
# benchmark (each launch shape alone: us and GB/s, fp8 / bf16), then bs=1 decode @1K of the Qwen3-0.6B and 8B
# shapes, bf16 vs fp8. Random weights; fp8 is the bf16 checkpoint under --quantization fp8 (quantized per
# 128 x 128 block at load). Run from the repository root on an H200 box.
#
#   scripts/bench/fp8_gemv_check.sh [BUILD_DIR]   BUILD_DIR: a CUDA build tree (default build/cuda; configured and
#                                                 built here when it has no tests/test_cuda or tools/nanovllm), or
#                                                 any folder holding those two binaries (e.g. unpacked from a carried
#                                                 tarball of the stripped binaries)
#
# Steps (seconds on one H200, after the build; ~150 in all, estimated):
#   1. test_cuda CudaFp8Linear.Gemv* + CudaFp8Linear.DeterministicAndRefusesWhatItCannotRun + CudaFp8Engine.*  ~30
#   2. test_cuda CudaFp8Bench.DISABLED_DecodeShapes (8 shapes x 13 timings)                                    ~30
#   3. make-test-model qwen3-0.6b and qwen3-8b (seed 1, in $MODELS_DIR, default /tmp; kept if present)        ~35
#   4. bench latency --skip-prefill, bs=1 decode @1K, 32 tokens: 0.6B and 8B, none and fp8                     ~60
# Output: $OUT (default ./fp8-gemv-out): one log per step, *.json reports; a summary with the ratios at the end
# (targets: 8B fp8 / bf16 <= 0.58, 0.6B <= 0.75).
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export NANOVLLM_TEST_DATA=${NANOVLLM_TEST_DATA:-$PWD/tests/data}
BUILD=${1:-build/cuda}
OUT=${OUT:-./fp8-gemv-out}
MODELS=${MODELS_DIR:-/tmp}
mkdir -p "$OUT"
source "$(dirname "$0")/steps.sh"  # run, FAILED, the build when missing
NV=$BUILD/tools/nanovllm

run tests "$BUILD/tests/test_cuda" \
  --gtest_filter='CudaFp8Linear.Gemv*:CudaFp8Linear.DeterministicAndRefusesWhatItCannotRun:CudaFp8Engine.*'
STEP_TAIL=80 run decode_shapes "$BUILD/tests/test_cuda" --gtest_also_run_disabled_tests \
  --gtest_filter='CudaFp8Bench.DISABLED_DecodeShapes'
make_model "$MODELS/q06" qwen3-0.6b
make_model "$MODELS/q8" qwen3-8b
for m in q06 q8; do
  for q in none fp8; do
    run "latency_${m}_$q" env NANOVLLM_LOG_LEVEL=info "$NV" bench latency --backend cuda --model "$MODELS/$m" \
      --quantization "$q" --context 1024 --decode-tokens 32 --skip-prefill --json-out "$OUT/latency_${m}_$q.json"
  done
done

echo "== summary"
grep -hE "PASSED|FAILED" "$OUT/tests.log" | head -20
grep -hE "^(0\.6B|8B) " "$OUT/decode_shapes.log"
decode_ms() {
  grep -hoE "decode bs=1 @ [0-9]+ context: [0-9.]+ ms/step median" "$OUT/latency_$1.log" | grep -oE "[0-9.]+ ms" |
    cut -d' ' -f1
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b; else printf "n/a" }'; }
for m in q06 q8; do
  B=$(decode_ms "${m}_none"); F=$(decode_ms "${m}_fp8")
  target=$([ $m = q06 ] && echo 0.75 || echo 0.58)
  echo "$m bs=1 decode @1K ms/step: bf16 ${B:-?}  fp8 ${F:-?} ($(ratio "${F:-0}" "${B:-0}")x; target <= ${target}x)"
done
echo "fp8_gemv_check: $([ "$FAILED" -eq 0 ] && echo all steps passed || echo SOME STEPS FAILED) (logs in $OUT)"
exit "$FAILED"
