#!/usr/bin/env bash
# Builds and runs the test suite. CUDA code is compiled whenever nvcc is found; `cuda`-labelled tests
# skip without a GPU. --asan also builds and runs the CPU tests under AddressSanitizer + UBSan. Every
# build fails on a compiler warning (NANOVLLM_WERROR).
set -euo pipefail
cd "$(dirname "$0")/.."
asan=0
for a in "$@"; do [ "$a" = --asan ] && asan=1; done
jobs=$(nproc)
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=$PATH:/usr/local/cuda/bin
  preset=cuda
else
  preset=cpu
fi
cmake --preset "$preset" -DNANOVLLM_WERROR=ON >/dev/null
cmake --build "build/$preset" -j "$jobs"
ctest --test-dir "build/$preset" --output-on-failure -j "$jobs"
if ((asan)); then
  cmake --preset asan -DNANOVLLM_WERROR=ON >/dev/null
  cmake --build build/asan -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build/asan --output-on-failure -j "$jobs" -L cpu
fi
