#!/usr/bin/env bash
# Session 32, call 3 (2 x H200, NVLink): every CUDA test with two GPUs present (tensor parallel, MoE TP, peer
# all-reduce), then Qwen3-MoE (30B-A3B shape, 24 of 48 layers) bs=1 latency on one GPU and on two
# (--tensor-parallel-size 2), and offline throughput on two. Binaries as call 1.
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
TAIL=6 step tests 240 $B/test_cuda --gtest_brief=1
M=/tmp/q30a3b-24l
step moe_model 120 $B/nanovllm make-test-model --out $M --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}'
step moe_latency_tp1 120 $B/nanovllm bench latency --model $M --context 1024 --decode-tokens 64 --prefill 1024,8192 --json-out "$OUT/moe_latency_tp1.json"
step moe_latency_tp2 120 $B/nanovllm bench latency --model $M --context 1024 --decode-tokens 64 --prefill 1024,8192 --tensor-parallel-size 2 --json-out "$OUT/moe_latency_tp2.json"
step moe_throughput_tp2 120 $B/nanovllm bench throughput --model $M --num-seqs 256 --min-input 512 --max-input 512 --min-output 512 --max-output 512 --tensor-parallel-size 2 --json-out "$OUT/moe_throughput_tp2.json"
