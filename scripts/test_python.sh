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
# From outside the checkout, so that `import nanovllm` can only be the installed package.
cd "$build"
NANOVLLM_CLI="$build/tools/nanovllm" "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/python/tests"
