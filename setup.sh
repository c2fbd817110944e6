#!/usr/bin/env bash
# Set up and run a demo:  ./setup.sh [--model HF_MODEL_DIR] [generate options...]
# Installs the Debian build dependencies, builds nano-vLLM C++ (with CUDA when nvcc is present) and runs
# scripts/demo.sh: text generated from a model (without --model, a tiny random-weight Qwen3 test model
# with the real tokenizer: no GPU, no download, gibberish text), then the commands to try next.
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

if [ -n "$model" ]; then
  scripts/demo.sh --bin "$bin" --model "$model" "$@"
else
  scripts/demo.sh --bin "$bin" "$@"
fi
