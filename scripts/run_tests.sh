#!/usr/bin/env bash
# Builds and runs the test suite: the C++ tests (ctest), then the Python package's (scripts/test_python.sh,
# pytest; the extension module is built in the same tree). CUDA code is compiled whenever nvcc is found;
# `cuda`-labelled tests skip without a GPU. --asan also builds and runs the CPU tests under AddressSanitizer + UBSan. Every
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
# The Python tests need an interpreter with pytest (Debian's python3-pytest, for /usr/bin/python3).
python=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import pytest, venv' 2>/dev/null; then python=$(command -v "$p"); break; fi
done
[ -n "$python" ] || { echo "run_tests.sh: no python3 with pytest (scripts/install_deps.sh installs it)" >&2; exit 1; }
cmake --preset "$preset" -DNANOVLLM_WERROR=ON -DNANOVLLM_PYTHON=ON -DPython_EXECUTABLE="$python" >/dev/null
cmake --build "build/$preset" -j "$jobs"
ctest --test-dir "build/$preset" --output-on-failure -j "$jobs"
scripts/test_python.sh "build/$preset" "$python"
if ((asan)); then
  cmake --preset asan -DNANOVLLM_WERROR=ON >/dev/null
  cmake --build build/asan -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build/asan --output-on-failure -j "$jobs" -L cpu
fi
