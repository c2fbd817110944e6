#!/usr/bin/env bash
# The Python package's tests, on a build tree that scripts/run_tests.sh configured with -DNANOVLLM_PYTHON=ON:
# installs the package as the README says (pip, offline, into a venv), reusing the tree so that nothing
# but the extension module is built, then runs python/tests with pytest (examples/ included).
#   scripts/test_python.sh BUILD_DIR PYTHON
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=$(cd "$1" && pwd)
python=$2
venv="$build/python-venv"
[ -x "$venv/bin/python" ] || "$python" -m venv --system-site-packages "$venv"
NANOVLLM_BUILD_DIR="$build" "$venv/bin/pip" install --quiet --no-build-isolation --no-index --no-deps . >/dev/null
# A sanitized tree's extension needs the ASan runtime loaded before the interpreter's own libraries, and
# libstdc++.so with it: ASan intercepts __cxa_throw where it starts, and without a libstdc++ loaded then (the
# interpreter has none; the extension links its own statically) the first C++ exception aborts. The interpreter's
# own allocations are not ours to check for leaks.
sanitizer_env=()
if grep -q '^NANOVLLM_SANITIZE:BOOL=ON' "$build/CMakeCache.txt"; then
  sanitizer_env=(LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)"
                 ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1)
fi
# From outside the checkout, so that `import nanovllm` can only be the installed package.
cd "$build"
env "${sanitizer_env[@]}" NANOVLLM_CLI="$build/tools/nanovllm" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/python/tests"
