#!/usr/bin/env bash
# s35 call 8: issue 46's GPU check (the fixture at 16K: dense vs avgpool budget 4096 + layer 0 dense, resident /
# offloaded / + Quest 2048) on the final tree (radix select, coalesced last-query scores).
set -uo pipefail
cd .carry && tar xJf bin.tar.xz && cd ..
mkdir -p /tmp/b/tests /tmp/b/tools && cp .carry/test_cuda /tmp/b/tests/ && cp .carry/nanovllm /tmp/b/tools/
export NANOVLLM_TEST_DATA=$PWD/tests/data
timeout 400 scripts/issue46_gpu_check.sh /tmp/b > $OUT/issue46.log 2>&1; echo "rc=$?"
grep -E "^==|PASSED|FAILED|overall|mean|niah" $OUT/issue46.log | head -40
