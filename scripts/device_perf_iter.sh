#!/usr/bin/env bash
# One device iteration of the decode-latency work: the CUDA op tests that touch the changed kernels, the
# decode-layer ablation benchmark, the sampler micro-benchmark, bs=1 latency (0.6B, 8B) and throughput.
# Usage (device): bash scripts/device_perf_iter.sh [test-filter]
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NANOVLLM_TEST_DATA=$PWD/tests/data
B=.carry/nanovllm
FILTER=${1:-*}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== test_cuda ($FILTER)"
.carry/test_cuda --gtest_filter="$FILTER" > $OUT/test_cuda.log 2>&1
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/test_cuda.log | head -20
$B make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 >/dev/null 2>&1 &
$B make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 >/dev/null 2>&1 &
echo "== micro-benchmarks"
.carry/test_cuda --gtest_also_run_disabled_tests \
  --gtest_filter="${MICRO:-CudaDecodePdlBench.DISABLED_DecodeLayers:CudaGemvBench.DISABLED_Shapes}" > $OUT/micro.log 2>&1
grep -vE "^\[|^Running|^Note" $OUT/micro.log
wait
echo "== latency"
$B bench latency --backend cuda --model /tmp/q06 --context 1024 --decode-tokens 64 --prefill 1024 --json-out $OUT/lat06.json 2>&1 | grep -v warn
$B bench latency --backend cuda --model /tmp/q8 --context 1024 --decode-tokens 64 --prefill 8192 --json-out $OUT/lat8.json 2>&1 | grep -v warn
echo "== throughput"
$B bench throughput --backend cuda --model /tmp/q06 --json-out $OUT/tput.json 2>&1 | grep -v warn | tail -12
