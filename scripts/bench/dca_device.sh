#!/usr/bin/env bash
# Dual Chunk Attention on the GPU machine (issue #48, docs/dual_chunk_attention.md), from the repository root:
# builds test_cuda (sm_90a), runs the DCA device tests and the attention tests whose kernels DCA shares, then
# the DCA-vs-plain kernel benchmark on the Qwen2.5-7B-1M attention shape (Hq 28, Hk 4, head_dim 128):
#   prefill: the last 8K-row chunk of a 128K prompt, with the real chunk (253,952: 128K is one chunk, so the
#            plain kernels run) and with a 28,672 chunk (128K spans five chunks: the DCA wgmma kernel);
#   decode:  batch 1 at 128K (both chunks) and 1M (the real chunk: four chunks), batch 8 at 128K.
#
#   scripts/bench/dca_device.sh [BUILD_DIR]     (default build/cuda; configured here when it has no build.ninja)
#
# Run time on one H200 once test_cuda is built: tests ~60 s, benchmark ~30 s.
set -euo pipefail
B=${1:-build/cuda}
export PATH=$PATH:/usr/local/cuda/bin
if [ ! -f "$B/build.ninja" ]; then
  cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES=90a -B "$B"
fi
cmake --build "$B" --target test_cuda -j"$(nproc)"
export NANOVLLM_TEST_DATA=${NANOVLLM_TEST_DATA:-$PWD/tests/data}
"$B/tests/test_cuda" --gtest_filter='CudaDualChunk.*:CudaAttention.*:CudaPrologue.*:CudaBlockSparsePrefill.*'
"$B/tests/test_cuda" --gtest_also_run_disabled_tests --gtest_filter='CudaDualChunkBench.*'
