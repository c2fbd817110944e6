#!/bin/bash
# Issue 33 (GLM-4) on the GPU machine, one call: the HF fp32 golden files of the glm4 entries of
# tests/data/golden/models.json, the CUDA tests that cover GLM-4 (kernels, e2e vs the goldens, offload),
# HF bf16 agreement on a random GLM-4-9B-Chat-1M-shaped model, `bench offload` at 128K on it, then the
# whole CUDA suite if time is left. D holds the CUDA build (nanovllm.xz, test_cuda.xz), a copy of
# tests/data as data/ and scripts/hf_golden.py, hf_bf16_agreement.py; results go to $OUT.
#   bash D/glm4-device-run.sh D [seconds]
set -u
D=${1:-.dev-glm4}
BUDGET=${2:-380}
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
stamp() { echo "== $(elapsed) s: $*"; }
exec > >(tee "$OUT/run.log") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
for f in nanovllm test_cuda; do xz -dkf -T0 "$D/$f.xz" && chmod +x "$D/$f"; done
export NANOVLLM_TEST_DATA=$PWD/$D/data

stamp "HF golden (transformers fp32 on the CPU) for the glm4 entries"
python3 "$D/hf_golden.py" --nanovllm "$D/nanovllm" --models "$D/data/golden/models.json" --out "$D/data/golden" \
  --only glm4 && cp "$D"/data/golden/glm4_*.json "$OUT/"

stamp "CUDA tests for GLM-4: prologue kernels, fused decode, e2e vs HF goldens, offload"
timeout 150 "$D/test_cuda" --gtest_filter='CudaPrologue.*:CudaElementwise.QkvPrologue*:CudaAttention.DecodeFusedPrologue*:Models/CudaVsGolden.*:CudaOffload.*' \
  > "$OUT/test_cuda_glm4.log" 2>&1; echo "test_cuda (glm4 filter) rc=$?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|CUDA vs HF" "$OUT/test_cuda_glm4.log"

stamp "random GLM-4-9B-Chat-1M checkpoint"
"$D/nanovllm" make-test-model --out /tmp/glm9 --preset glm4-9b --seed 1

stamp "HF bf16 agreement (8 prompts x 64 steps, teacher-forced)"
timeout 200 python3 "$D/hf_bf16_agreement.py" --nanovllm "$D/nanovllm" --model /tmp/glm9 --prompts 8 --steps 64 \
  --max-model-len 4096 --json-out "$OUT/agree.json"; echo "agreement rc=$?"

stamp "bench offload at 128K"
timeout 150 "$D/nanovllm" bench offload --backend cuda --model /tmp/glm9 --context 131072 --output-len 8 --no-compare \
  --json-out "$OUT/offload.json"; echo "bench offload rc=$?"

left=$(( BUDGET - $(elapsed) ))
if [ "$left" -gt 60 ]; then
  stamp "whole CUDA suite (timeout ${left} s)"
  timeout "$left" "$D/test_cuda" > "$OUT/test_cuda_full.log" 2>&1; echo "test_cuda (all) rc=$?"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" "$OUT/test_cuda_full.log"
else
  echo "whole CUDA suite skipped: ${left} s left"
fi
stamp done
