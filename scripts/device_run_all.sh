#!/usr/bin/env bash
# One device-machine session: CUDA tests (incl. sanitizer), micro-benchmarks and engine benchmarks.
# Run from the repo root with the binaries in .carry/ (built here: cmake --preset cuda).
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NANOVLLM_TEST_DATA=$PWD/tests/data
B=.carry/nanovllm
T=.carry/test_cuda
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "== test_cuda"; $T 2>&1 > $OUT/test_cuda.log; grep -E "FAILED|PASSED|Failure|CUDA vs" $OUT/test_cuda.log | head -30
echo "== micro-benchmarks"; $T --gtest_also_run_disabled_tests --gtest_filter="${MICRO:-*DISABLED_*}" > $OUT/micro.log 2>&1; grep -E "PASSED|FAILED" $OUT/micro.log
if [ "${SANITIZE:-0}" = 1 ]; then
  /usr/local/cuda/bin/compute-sanitizer --tool memcheck $T --gtest_filter='-*Golden*:CudaVsCpu*' > $OUT/memcheck.log 2>&1; tail -2 $OUT/memcheck.log
fi
[ "${BENCH:-1}" = 1 ] || exit 0
$B make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 >/dev/null 2>&1
$B make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 >/dev/null 2>&1
echo "== latency 0.6B"; $B bench latency --backend cuda --model /tmp/q06 --context 1024 --decode-tokens 64 --prefill 1024,8192 --json-out $OUT/lat06.json 2>&1 | grep -v warn
echo "== latency 8B"; $B bench latency --backend cuda --model /tmp/q8 --context 1024 --decode-tokens 64 --prefill 1024,8192,32768 --json-out $OUT/lat8.json 2>&1 | grep -v warn
echo "== throughput 0.6B"; timeout 240 $B bench throughput --backend cuda --model /tmp/q06 --num-seqs ${NSEQ:-256} --json-out $OUT/tp06.json 2>&1 | grep -v warn
