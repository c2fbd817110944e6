#!/usr/bin/env bash
# Session 32, call 6 (one H200): call 5 at 256K, 512K and 1M tokens (4 samples a cell). Binaries as call 1.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
MAX_POS=1100000 timeout 500 scripts/eval_dca_ruler.sh /tmp/b/new/nanovllm /tmp/dca-eval --context 262144,524288,1048576 \
  --samples 4 --tasks niah_single_1,niah_single_2,niah_multikey_1 --skip-too-short > "$OUT/dca_eval.log" 2>&1
echo "eval_dca_ruler rc=$?"
cp /tmp/dca-eval/*.json "$OUT/" 2>/dev/null
grep -vE '^\s*$' "$OUT/dca_eval.log" | tail -30
