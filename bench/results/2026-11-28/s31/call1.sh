#!/usr/bin/env bash
# Session 31, call 1 (one H200): issue 44's same-call A/B — the refactor (new) against 6dcf662 (old) — and the
# engine-level CUDA tests of the refactored runners. Binaries come in .carry/bin.tar.xz: old/nanovllm,
# new/nanovllm, new/test_cuda (sm_90a). Writes $OUT/*.log.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
OLD=/tmp/b/old/nanovllm NEW=/tmp/b/new/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
git log -1 --format='tree %h %s' 2>/dev/null | tee -a "$OUT/device.txt"
timeout 200 /tmp/b/new/test_cuda --gtest_filter='CudaVsCpu.*:CudaSparseDecode.*:CudaOffload.*:CudaDecodeFusion.*:Models/CudaVsGolden.*' \
  > "$OUT/tests.log" 2>&1; echo "test_cuda rc=$?" | tee -a "$OUT/tests.log"; tail -3 "$OUT/tests.log"
OUT=$OUT/ab scripts/bench/device_bench.sh ab-latency "$OLD" "$NEW" 2 > /dev/null 2>&1; tail -12 "$OUT/ab/ab-latency.log"
OUT=$OUT/ab scripts/bench/device_bench.sh ab-throughput "$OLD" "$NEW" 2 q06 > /dev/null 2>&1; tail -6 "$OUT/ab/ab-throughput.log"
