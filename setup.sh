#!/usr/bin/env bash
# Set up and run a demo:  ./setup.sh [--model HF_MODEL_DIR] [generate options...]
# Installs the Debian build dependencies, builds nano-vLLM C++ (with CUDA when nvcc is present) and
# generates from a model. Without --model it writes a tiny random-weight Qwen3 checkpoint first, so the
# demo needs no GPU and no download.
set -euo pipefail
cd "$(dirname "$0")"
model=""
if [ "${1:-}" = --model ]; then model=$2; shift 2; fi

scripts/install_deps.sh
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=$PATH:/usr/local/cuda/bin; preset=cuda
else
  preset=cpu
fi
cmake --preset "$preset" >/dev/null
cmake --build "build/$preset" -j "$(nproc)" --target nanovllm
bin="build/$preset/tools/nanovllm"

if [ -z "$model" ]; then
  model=build/tiny-qwen3
  [ -f "$model/config.json" ] || "$bin" make-test-model --out "$model" --preset tiny --seed 0
fi
echo "== $bin generate --model $model --prompt-ids 1,2,3,4 --prompt-ids 5,6 --temperature 0 --max-tokens 16 $*"
"$bin" generate --model "$model" --prompt-ids 1,2,3,4 --prompt-ids 5,6 --temperature 0 --max-tokens 16 \
  --logprobs 2 --json "$@"
