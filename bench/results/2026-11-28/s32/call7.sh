#!/usr/bin/env bash
# Session 32, call 7 (one H200): the merged tree with issue 51's FP8 checkpoints — every CUDA test, then
# scripts/bench/fp8_device.sh (fp8 kernel tests and micro-benchmarks, HF fp8 goldens, bs=1 latency and 8K prefill of
# the 0.6B and 8B shapes, bf16 vs --quantization fp8 in one run). Binaries as call 1.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
mkdir -p /tmp/b/build/tests /tmp/b/build/tools
ln -sf /tmp/b/new/test_cuda /tmp/b/build/tests/test_cuda; ln -sf /tmp/b/new/nanovllm /tmp/b/build/tools/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
t0=$SECONDS
timeout 200 /tmp/b/new/test_cuda --gtest_brief=1 > "$OUT/tests.log" 2>&1
echo "test_cuda rc=$? $((SECONDS - t0)) s"; grep -E "FAILED|PASSED|SKIPPED \]|tests from" "$OUT/tests.log" | tail -8
OUT=$OUT/fp8 timeout 330 scripts/bench/fp8_device.sh /tmp/b/build > "$OUT/fp8_device.log" 2>&1
echo "fp8_device rc=$?"
tar -cJf "$OUT/fp8_golden.tar.xz" -C "$OUT/fp8" golden 2>/dev/null && rm -rf "$OUT/fp8/golden"
tail -45 "$OUT/fp8_device.log"
