#!/usr/bin/env bash
# Qwen3-MoE on the GPU machine (issue #49, docs/moe.md): the CUDA MoE tests, the HF transformers goldens, and the
# benchmarks on the Qwen3-30B-A3B shape with random weights. Run from the repository root on an H200 box.
#
#   scripts/bench/moe_device.sh [BUILD_DIR]      BUILD_DIR: a CUDA build tree (default build/cuda; configured and
#                                                built here when it has no tests/test_cuda)
#
# Steps (seconds on one H200, after the build):
#   1. test_cuda --gtest_filter='CudaMoe*'                                             ~30
#   2. python3 scripts/hf_moe_golden.py --out tests/data/golden (CPU torch + transformers) ~10; then the CPU golden
#      tests that read those files (needs a CPU build tree in build/cpu; skipped if absent)
#   3. make-test-model qwen3-30b-a3b with 24 of its 48 layers (31 GB; the 64 GB disk of a one-GPU box holds it,
#      not the 61 GB of all 48; every layer is alike, and the floors are computed from the same config)  ~40
#   4. bench latency: bs=1 decode @1K (ms/token vs the floor of the bytes a step reads), prefill 1K / 8K   ~30
#   5. bench throughput: 256 x (512 in, 512 out)                                         ~30
# Output: $OUT (default ./moe-out): one log per step.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
BUILD=${1:-build/cuda}
OUT=${OUT:-./moe-out}
MODEL=${MODEL:-/tmp/q30a3b-24l}
mkdir -p "$OUT"
source "$(dirname "$0")/steps.sh"  # run, FAILED, the build when missing
run tests "$BUILD/tests/test_cuda" --gtest_filter='CudaMoe*'
run golden python3 scripts/hf_moe_golden.py --out tests/data/golden
if [ -x build/cpu/tests/test_e2e ]; then
  run golden_check bash -c "build/cpu/tests/test_e2e --gtest_filter='*HfMoeGolden*' && \
                            build/cpu/tests/test_kernels --gtest_filter='MoeRoute.Ties*'"
fi
[ -f "$MODEL/config.json" ] || run make_model "$BUILD/tools/nanovllm" make-test-model --out "$MODEL" \
  --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}'
run latency "$BUILD/tools/nanovllm" bench latency --model "$MODEL" --context 1024 --decode-tokens 64 \
  --prefill 1024,8192 --json-out "$OUT/latency.json"
run throughput "$BUILD/tools/nanovllm" bench throughput --model "$MODEL" --num-seqs 256 --min-input 512 \
  --max-input 512 --min-output 512 --max-output 512 --json-out "$OUT/throughput.json"
echo "moe_device: $([ $FAILED -eq 0 ] && echo all steps passed || echo SOME STEPS FAILED) (logs in $OUT)"
exit $FAILED
