#!/usr/bin/env bash
# The fp8 GEMM past 16 rows (issue #51, docs/fp8.md): cuBLASLt's block-scaled fp8 matmul, with our mma.sync kernel as
# its fallback, on the GPU machine in one run: the CUDA fp8 tests (both GEMMs against the CPU references, the engine
# against the CPU backend), the GEMMs alone at 8192 rows on the Qwen3-8B shapes, then 8B prefill 8K and 0.6B offline
# throughput, bf16 vs fp8. Random weights; fp8 is the bf16 checkpoint under --quantization fp8 (quantized per
# 128 x 128 block at load). Run from the repository root on an H200 box.
#
#   scripts/bench/fp8_gemm_check.sh [BUILD_DIR]   BUILD_DIR: a CUDA build tree (default build/cuda; configured and
#                                                 built here when it has no tests/test_cuda or tools/nanovllm)
#
# Steps (seconds on one H200, after the build; ~150 in all):
#   1. test_cuda CudaFp8Linear.* + CudaFp8Bench.DISABLED_PrefillShapes (GEMM TFLOP/s), CudaFp8Engine.*    ~50
#   2. make-test-model qwen3-0.6b and qwen3-8b (seed 1, in $MODELS_DIR, default /tmp; kept if present)  ~35
#   3. bench latency 8B, prefill 8192 (+ bs=1 decode @1K, 16 tokens): none, fp8                          ~40
#   4. bench throughput 0.6B ([thr]): none, fp8                                                           ~30
# Output: $OUT (default ./fp8-gemm-out): one log per step, *.json reports; a summary with the ratios at the end.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
BUILD=${1:-build/cuda}
OUT=${OUT:-./fp8-gemm-out}
MODELS=${MODELS_DIR:-/tmp}
mkdir -p "$OUT"
source "$(dirname "$0")/steps.sh"  # run, FAILED, the build when missing
NV=$BUILD/tools/nanovllm

run tests "$BUILD/tests/test_cuda" --gtest_also_run_disabled_tests \
  --gtest_filter='CudaFp8Linear.*:CudaFp8Bench.DISABLED_PrefillShapes:CudaFp8Engine.*'
make_model "$MODELS/q06" qwen3-0.6b
make_model "$MODELS/q8" qwen3-8b
for q in none fp8; do
  run "latency_q8_$q" env NANOVLLM_LOG_LEVEL=info "$NV" bench latency --backend cuda --model "$MODELS/q8" \
    --quantization "$q" --context 1024 --decode-tokens 16 --prefill 8192 --json-out "$OUT/latency_q8_$q.json"
done
for q in none fp8; do
  run "throughput_q06_$q" "$NV" bench throughput --backend cuda --model "$MODELS/q06" --quantization "$q" \
    --json-out "$OUT/throughput_q06_$q.json"
done

echo "== summary"
grep -hE "TFLOP/s|NMSE vs the quantized|cuBLASLt has no|steps agree|PASSED|FAILED" "$OUT/tests.log" | head -60
prefill() { grep -hoE "prefill 8192 tokens: [0-9.]+ ms, [0-9]+ tok/s" "$OUT/latency_q8_$1.log" | grep -oE "[0-9]+ tok/s" | cut -d' ' -f1; }
thr() { grep -hoE "[0-9]+ output tok/s" "$OUT/throughput_q06_$1.log" | cut -d' ' -f1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b; else printf "n/a" }'; }
B=$(prefill none); F=$(prefill fp8)
echo "8B prefill 8K tok/s: bf16 ${B:-?}  fp8 ${F:-?} ($(ratio "${F:-0}" "${B:-0}")x; target >= 1.5x)"
B=$(thr none); F=$(thr fp8)
echo "0.6B throughput output tok/s: bf16 ${B:-?}  fp8 ${F:-?} ($(ratio "${F:-0}" "${B:-0}")x; target >= 1.2x)"
echo "fp8_gemm_check: $([ "$FAILED" -eq 0 ] && echo all steps passed || echo SOME STEPS FAILED) (logs in $OUT)"
exit "$FAILED"
