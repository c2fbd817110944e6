#!/usr/bin/env bash
# Session 32, call 1 (one H200): the merged tree (issues 44, 45, 46 items 1-2, 48, 49, 50) — every CUDA test, and
# the HF transformers goldens of the MoE models (scripts/hf_moe_golden.py, CPU torch). Binaries come in
# .carry/bin.tar.xz: new/nanovllm, new/test_cuda (sm_90a). Writes $OUT/*.log and $OUT/golden/.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
git log -1 --format='tree %h %s' 2>/dev/null | tee -a "$OUT/device.txt"
t0=$SECONDS
python3 scripts/hf_moe_golden.py --out "$OUT/golden" > "$OUT/golden.log" 2>&1; echo "golden rc=$? $((SECONDS - t0)) s" | tee -a "$OUT/golden.log"
t0=$SECONDS
timeout 480 /tmp/b/new/test_cuda --gtest_brief=1 > "$OUT/tests.log" 2>&1
echo "test_cuda rc=$? $((SECONDS - t0)) s" | tee -a "$OUT/tests.log"; tail -40 "$OUT/tests.log"
