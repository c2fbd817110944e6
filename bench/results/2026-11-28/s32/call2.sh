#!/usr/bin/env bash
# Session 32, call 2 (one H200): the merged tree's new features measured — Qwen3-MoE (30B-A3B shape, 24 of its 48
# layers), Dual Chunk Attention against plain attention (kernel benchmark), structured outputs' cost in throughput,
# and issue 46's 16K evals (avgpool resident vs offloaded, with and without Quest). Binaries as call 1.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
B=/tmp/b/new
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
step() {  # step NAME SECONDS CMD...: log to $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "== $name: rc=$? $((SECONDS - t0)) s"; tail -n 14 "$OUT/$name.log"
}
step golden 60 bash -c "python3 scripts/hf_moe_golden.py --out /tmp/golden && tar -cJf $OUT/golden.tar.xz -C /tmp golden"
step tests_fixed 120 $B/test_cuda --gtest_filter='CudaStructuredOutputs.*:CudaOffload.SparsePrefillCoversEveryPromptOfABatchedStep'
M=/tmp/q30a3b-24l
step moe_model 120 $B/nanovllm make-test-model --out $M --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}'
step moe_latency 120 $B/nanovllm bench latency --model $M --context 1024 --decode-tokens 64 --prefill 1024,8192 --json-out "$OUT/moe_latency.json"
step moe_throughput 120 $B/nanovllm bench throughput --model $M --num-seqs 256 --min-input 512 --max-input 512 --min-output 512 --max-output 512 --json-out "$OUT/moe_throughput.json"
rm -rf $M
step dca_bench 90 $B/test_cuda --gtest_also_run_disabled_tests --gtest_filter='CudaDualChunkBench.*'
step structured 150 env OUT="$OUT/structured" scripts/bench/device_bench.sh structured $B/nanovllm
mkdir -p /tmp/b/build/tests /tmp/b/build/tools
ln -sf $B/test_cuda /tmp/b/build/tests/test_cuda; ln -sf $B/nanovllm /tmp/b/build/tools/nanovllm
step issue46 200 scripts/issue46_gpu_check.sh /tmp/b/build
