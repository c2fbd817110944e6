#!/usr/bin/env bash
# Session 32, call 5 (one H200): Dual Chunk Attention's quality past the retrieval fixture's trained length (16K):
# scripts/eval_dca_ruler.sh at 64K and 128K, plain RoPE vs DCA (chunk 16384, local 1024), same prompts.
# Binaries as call 1.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
timeout 400 scripts/eval_dca_ruler.sh /tmp/b/new/nanovllm /tmp/dca-eval > "$OUT/dca_eval.log" 2>&1
echo "eval_dca_ruler rc=$?"
cp /tmp/dca-eval/*.json "$OUT/" 2>/dev/null
grep -vE '^\s*$' "$OUT/dca_eval.log" | grep -vE 'prompts [0-9.]+ s' | tail -40
