#!/usr/bin/env bash
# The test suite (the README's test command), every test once, in one build tree:
#   build/asan (preset asan): src/ instrumented with AddressSanitizer + UBSan (tests/, tools/ and python/ compiled
#   plain and linked to the sanitizers' runtime; the CPU reference kernels plain at -O2, see
#   src/nanovllm/kernels/CMakeLists.txt), the CUDA code compiled for one architecture when nvcc is there (the
#   GPU's, or sm_90a), the `nanovllm` binary and the Python extension. Then the C++ tests (labels cpu and eval;
#   cuda where there is a GPU), then the Python package's tests (scripts/test_python.sh, pytest). Not as a background
#   job beside ctest: bash starts background jobs with SIGINT ignored, Python keeps it ignored, and the Ctrl-C tests
#   (python/tests/test_abort.py) then generate 20000 tokens instead of stopping.
# Every build fails on a compiler warning (NANOVLLM_WERROR). Prints how long each part took.
# Without a GPU the CUDA code is compiled to PTX only (compute_90a) and unoptimized (NANOVLLM_CUDA_COMPILE_CHECK): it
# must compile, nothing here runs it; ptxas was a third of each .cu file's compile, the optimizers half of the rest.
#   scripts/run_tests.sh [--no-asan]   --no-asan: a release tree instead (build/cuda, or build/cpu without nvcc)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=asan
for a in "$@"; do
  case "$a" in
    --no-asan) preset="" ;;
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
  [ -n "$preset" ] || preset=cuda
else
  [ -n "$preset" ] || preset=cpu
fi
# The Python tests need an interpreter with pytest (Debian's python3-pytest, for /usr/bin/python3).
python=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import pytest, venv' 2>/dev/null; then python=$(command -v "$p"); break; fi
done
[ -n "$python" ] || { echo "run_tests.sh: no python3 with pytest (scripts/install_deps.sh installs it)" >&2; exit 1; }

have_gpu=0
if nvidia-smi -L >/dev/null 2>&1; then have_gpu=1; fi
# With a GPU the architecture is detected again (CMakeLists.txt), also in a tree once configured without one.
cuda_args=(-UCMAKE_CUDA_ARCHITECTURES -DNANOVLLM_CUDA_COMPILE_CHECK=OFF)
if [ $have_gpu = 0 ]; then cuda_args=(-DCMAKE_CUDA_ARCHITECTURES=90a-virtual -DNANOVLLM_CUDA_COMPILE_CHECK=ON); fi
cmake --preset "$preset" -DNANOVLLM_WERROR=ON -DNANOVLLM_PYTHON=ON -DPython_EXECUTABLE="$python" "${cuda_args[@]}" \
  >/dev/null
cmake --build "build/$preset" -j "$jobs"
took "the $preset build"
# protect_shadow_gap=0: the CUDA driver maps memory where ASan's shadow gap would be (a GPU box running the
# sanitized tree's cuda tests).
# Without a GPU each cuda test would only start its binary to skip (~1.4 s each under the sanitizers, 160 of them):
# the label is left out and said so.
ctest_args=()
if [ $have_gpu = 0 ]; then
  ctest_args=(-LE cuda)
  echo "run_tests.sh: no GPU here: the cuda-labelled tests are not run"
fi
ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "build/$preset" --output-on-failure -j "$jobs" "${ctest_args[@]}"
took "the C++ tests"
scripts/test_python.sh "build/$preset" "$python"
took "the Python tests"
echo "run_tests.sh: all passed in $((SECONDS - start)) s"
