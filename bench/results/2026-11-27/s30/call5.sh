#!/bin/bash
# Session 30 call 5 (one GPU): the estimator tests after AvgPool and XAttention moved to the shared
# op_workspace (no behaviour change expected), and the sparse prefill e2e on CUDA.
set -u
D=.dev-s30
xz -dkf -T0 $D/test_cuda.xz; chmod +x $D/test_cuda
export NANOVLLM_TEST_DATA=$PWD/tests/data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 300 $D/test_cuda --gtest_filter='CudaPatternEstimators.*:CudaEstimator*:CudaOffload.SparsePrefill*:CudaBlockSparse*' > $OUT/test_cuda.log 2>&1
echo "rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/test_cuda.log
