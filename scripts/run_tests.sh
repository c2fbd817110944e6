#!/usr/bin/env bash
# The test suite (the README's test command), every test once:
#   1. the C++ tests labelled cpu (all but the eval ones), in an AddressSanitizer + UBSan build (build/asan);
#   2. a release build (build/cuda with nvcc, else build/cpu) of only what the rest needs — the `nanovllm`
#      binary, the Python extension, test_eval and, with nvcc, the CUDA kernels for one architecture (the GPU's,
#      or sm_90a) and test_cuda — then the eval-labelled tests (compute-bound quality runs: a third of their ASan
#      time), the cuda-labelled tests (they skip without a GPU) and the Python package's tests
#      (scripts/test_python.sh, pytest).
# Every build fails on a compiler warning (NANOVLLM_WERROR). Prints how long each part took.
#   scripts/run_tests.sh [--no-asan]   --no-asan: the cpu tests in the release build instead (a faster build)
set -euo pipefail
cd "$(dirname "$0")/.."
asan=1
for a in "$@"; do
  case "$a" in
    --no-asan) asan=0 ;;
    --asan) ;;  # the default; kept for older callers
    *) echo "usage: $0 [--no-asan]" >&2; exit 1 ;;
  esac
done
jobs=$(nproc)
start=$SECONDS
lap=$SECONDS
took() { echo "run_tests.sh: $1 took $((SECONDS - lap)) s"; lap=$SECONDS; }
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

if ((asan)); then
  cmake --preset asan -DNANOVLLM_WERROR=ON >/dev/null
  cmake --build build/asan -j "$jobs"
  took "the ASan + UBSan build"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build/asan --output-on-failure -j "$jobs" -L cpu
  took "the cpu tests (ASan + UBSan)"
fi

cmake --preset "$preset" -DNANOVLLM_WERROR=ON -DNANOVLLM_PYTHON=ON -DPython_EXECUTABLE="$python" >/dev/null
targets=(nanovllm _core test_eval)
[ "$preset" = cuda ] && targets+=(test_cuda)
((asan)) || targets=(all)
cmake --build "build/$preset" -j "$jobs" --target "${targets[@]}"
took "the $preset build (${targets[*]})"
if ((asan)); then
  ctest --test-dir "build/$preset" --output-on-failure -j "$jobs" -L eval
  [ "$preset" = cuda ] && ctest --test-dir "build/$preset" --output-on-failure -L cuda
else
  ctest --test-dir "build/$preset" --output-on-failure -j "$jobs"
fi
scripts/test_python.sh "build/$preset" "$python"
took "the $preset and Python tests"
echo "run_tests.sh: all passed in $((SECONDS - start)) s"
