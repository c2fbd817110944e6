#!/usr/bin/env bash
# Session 32, call 3 (one H200; two were not lent): the staged-inputs test, then Qwen3-MoE (30B-A3B shape, 24 of
# 48 layers) bs=1 latency and prefill. Binaries as call 1.
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
  echo "== $name: rc=$? $((SECONDS - t0)) s"; tail -n "${TAIL:-12}" "$OUT/$name.log"
}
TAIL=6 step tests 240 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaVsCpu.*:CudaMoe*'
M=/tmp/q30a3b-24l
step moe_model 120 $B/nanovllm make-test-model --out $M --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}'
step moe_latency_tp1 120 $B/nanovllm bench latency --model $M --context 1024 --decode-tokens 64 --prefill 1024,8192 --json-out "$OUT/moe_latency_tp1.json"
