#!/usr/bin/env bash
# The persistent decode kernel on the device, in two parts (each fits one 600 s call):
#   tests: every CUDA test, compute-sanitizer memcheck of the persistent kernel's tests, and its
#          DISABLED_ benchmark (persistent vs layer loop, per-phase trace);
#   e2e:   bs=1 latency with NANOVLLM_PERSISTENT_DECODE=0 / 1 alternating (Qwen3-0.6B x2, 8B x1), and
#          HF bf16 agreement of the 0.6B and 4B shapes with it on.
# Usage (device): bash scripts/device_persistent_decode.sh tests|e2e   (binaries in .carry/, logs to $OUT)
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NANOVLLM_TEST_DATA=$PWD/tests/data
B=.carry/nanovllm
case "${1:-tests}" in
  tests)
    .carry/test_cuda > "$OUT/test_cuda.log" 2>&1
    grep -E "^\[  (PASSED|FAILED)|tests ran" "$OUT/test_cuda.log"
    timeout 300 compute-sanitizer --tool memcheck .carry/test_cuda \
      --gtest_filter='CudaPersistentDecode.HeadDim64Gqa2Block16:CudaPersistentDecode.HeadDim128Gqa4OddWidths' \
      > "$OUT/memcheck.log" 2>&1
    grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck.log"
    .carry/test_cuda --gtest_filter='CudaPersistentDecodeBench.*' --gtest_also_run_disabled_tests \
      > "$OUT/bench.log" 2>&1
    grep -E "Qwen3" "$OUT/bench.log"
    ;;
  e2e)
    for m in q06:qwen3-0.6b q4:qwen3-4b q8:qwen3-8b; do
      [ -d /tmp/${m%%:*} ] || $B make-test-model --out /tmp/${m%%:*} --preset ${m##*:} --seed 1 >/dev/null 2>&1
    done
    for run in q06:1 q06:2 q8:1; do
      m=${run%%:*}; i=${run##*:}
      for v in 0 1; do
        NANOVLLM_PERSISTENT_DECODE=$v $B bench latency --backend cuda --model /tmp/$m --context 1024 \
          --decode-tokens 64 --prefill 1024 --json-out "$OUT/lat_${m}_pd${v}_$i.json" > "$OUT/lat_${m}_pd${v}_$i.log" 2>&1
        printf '%-4s pd=%s %s\n' "$m" "$v" "$(grep -E 'decode bs' "$OUT/lat_${m}_pd${v}_$i.log")"
      done
    done
    for m in q06 q4; do
      NANOVLLM_PERSISTENT_DECODE=1 PYTHONUNBUFFERED=1 timeout 200 python3 scripts/hf_bf16_agreement.py --nanovllm $B \
        --model /tmp/$m --json-out "$OUT/agree_${m}_pd1.json" 2>&1 | grep -E "agreement|Error|error"
    done
    ;;
esac
