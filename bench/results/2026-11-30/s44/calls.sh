#!/usr/bin/env bash
# Session 44 (2026-11-30): the scripts of its device calls, one section per call under "# ## <name> {#id}"; they ran
# from the repository root on one H200 (call 6 on two, nvidia-h200-x2) with stripped builds in .carry/: X = a502310
# (main at the session's start; call 1's test_cuda with globaltimer stamps in the MoE decode router and a runtime
# switch to a cluster-free "last CTA routes" router), Y = X + route_token by redux.sync + the grouping reading the ids
# from shared memory + a switch for the down + combine kernel's prologue (EXP_DOWN_PF; stamps in test_cuda), Z = Y + a
# switch to a wgmma tiled GEMM (EXP_MOE_WG, bf16 experts), W = 770c29c + the wgmma kernel as first committed (bf16 and
# fp8, 3 stages, no async-proxy fence), W2 / W3 = 44a2930 (with the fence), V = fb138be's test_cuda (call 7). The
# experiments' switches and stamps were never committed. Run one section with
#   bash bench/results/2026-11-30/s44/calls.sh ID [ARGS...]
# (no ID lists them).
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## call1 {#call1}
#!/bin/bash
# s44 call 1 (one H200): X = a502310 + experiment: the decode router with globaltimer stamps (test_cuda only) and a
# runtime switch EXP_ROUTER_TICKET (8 CTAs without a cluster; the last CTA by an atomic ticket routes and groups).
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/X; tar -xJf $D/X.tar.xz -C $D/X
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/X/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make30.log 2>&1 &
MK=$!
log "ticket tests"
EXP_ROUTER_TICKET=1 timeout 120 $D/X/test_cuda --gtest_filter='MoeDecode.*:CudaMoe*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/tests.log | head; grep -A8 Failure $OUT/tests.log | head -20
for v in cluster ticket; do
  log "stamps $v"
  if [ $v = ticket ]; then export EXP_ROUTER_TICKET=1; else unset EXP_ROUTER_TICKET; fi
  timeout 120 $D/X/test_cuda --gtest_also_run_disabled_tests --gtest_filter='MoeDecodeBench.DISABLED_FusedVsUnfused' > $OUT/stamps_$v.log 2>&1
  grep -E "^moe decode" $OUT/stamps_$v.log
  grep -A10 "router launch" $OUT/stamps_$v.log | head -33
done
unset EXP_ROUTER_TICKET
wait $MK; echo "make rc $?"
lat() {  # lat VARIANT
  log "q30 $1"
  if [ $1 = ticket ]; then export EXP_ROUTER_TICKET=1; else unset EXP_ROUTER_TICKET; fi
  timeout 60 $D/X/nanovllm bench latency --backend cuda --model /tmp/q30 --context 1024 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "^decode" | tee -a $OUT/lat.log
}
lat cluster; lat ticket; lat cluster; lat ticket
log done

# ## call2 {#call2}
#!/bin/bash
# s44 call 2 (one H200): X = a502310 (nanovllm); Y = X + route_token picks by redux.sync (weights kept in lanes, one
# store each) + the decode router groups from the ids in shared memory + EXP_DOWN_PF: the down+combine prologue
# reads the active list (kernel n-2's output) and loads its first step before the wait (1), + an L2 bulk prefetch of
# the warp's first expert's 16-row slab (2), the same with an evict_last hint (3). test_cuda of Y has router stamps.
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/X $D/Y; tar -xJf $D/X.tar.xz -C $D/X; tar -xJf $D/Y.tar.xz -C $D/Y
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/X/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make30.log 2>&1 &
MK=$!
for pf in 0 2; do
  log "Y tests pf=$pf"
  EXP_DOWN_PF=$pf timeout 150 $D/Y/test_cuda --gtest_filter='MoeDecode.*:CudaMoe*' > $OUT/tests_$pf.log 2>&1; echo "tests rc $?"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/tests_$pf.log | head; grep -A8 Failure $OUT/tests_$pf.log | head -20
done
for pf in 0 1 2 3; do
  log "stamps pf=$pf"
  EXP_DOWN_PF=$pf timeout 120 $D/Y/test_cuda --gtest_also_run_disabled_tests --gtest_filter='MoeDecodeBench.DISABLED_FusedVsUnfused' > $OUT/stamps_$pf.log 2>&1
  grep -E "^moe decode bf16 T= [14]" $OUT/stamps_$pf.log
  [ $pf = 0 ] && grep -A10 "router launch" $OUT/stamps_$pf.log | head -22
done
wait $MK; echo "make rc $?"
lat() {  # lat BIN PF
  log "q30 $1 pf=$2"
  EXP_DOWN_PF=$2 timeout 60 $D/$1/nanovllm bench latency --backend cuda --model /tmp/q30 --context 1024 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "^decode" | tee -a $OUT/lat.log
}
for r in 1 2; do lat X 0; lat Y 0; lat Y 1; lat Y 2; lat Y 3; done
log done

# ## call3 {#call3}
#!/bin/bash
# s44 call 3 (one H200): Z = Y (route_token by redux.sync, ...) + EXP_MOE_WG: the experts' tiled GEMM of long steps on
# a wgmma (sm_90a) kernel with 4 (1 CTA/SM) or 3 stages (2 CTAs/SM); 0 = the mma.sync kernel. Tests, the tiled-GEMM
# rate, 30B-A3B (24 layers) prefill 8K and offline throughput A/B.
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/Z; tar -xJf $D/Z.tar.xz -C $D/Z
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/Z/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make30.log 2>&1 &
MK=$!
for wg in 4 3; do
  log "tests wg=$wg"
  EXP_MOE_WG=$wg timeout 150 $D/Z/test_cuda --gtest_filter='CudaMoe*:MoeDecode.*' > $OUT/tests_$wg.log 2>&1; echo "tests rc $?"
  grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/tests_$wg.log | head; grep -B2 -A10 Failure $OUT/tests_$wg.log | head -40
done
for wg in 0 4 3; do
  log "rate wg=$wg"
  EXP_MOE_WG=$wg timeout 100 $D/Z/test_cuda --gtest_also_run_disabled_tests --gtest_filter='MoeGemmBench.*' 2>&1 | grep -E "^moe tiled|FAIL"
done
wait $MK; echo "make rc $?"
for wg in 0 4 3 0 4; do
  log "prefill wg=$wg"
  EXP_MOE_WG=$wg timeout 100 $D/Z/nanovllm bench latency --backend cuda --model /tmp/q30 --context 1024 --decode-tokens 16 --prefill 8192 2>&1 | grep -E "^prefill|^decode" | tee -a $OUT/lat.log
done
for wg in 0 4; do
  log "throughput wg=$wg"
  EXP_MOE_WG=$wg timeout 150 $D/Z/nanovllm bench throughput --backend cuda --model /tmp/q30 --num-seqs 256 --min-input 512 --max-input 512 --min-output 512 --max-output 512 > $OUT/tput_$wg.log 2>&1
  grep -iE "tok/s|roofline" $OUT/tput_$wg.log | head -4
done
log done

# ## call4 {#call4}
#!/bin/bash
# s44 call 4 (one H200): X = a502310 (main at the session's start); W = 770c29c + the experts' tiled GEMM on a wgmma
# kernel (3 stages, 2 CTAs an SM; bf16 and fp8 experts). MoE tests (both tiled kernels), engine tests, memcheck,
# the tiled-GEMM rate, then 30B-A3B (24 layers) X vs W: prefill 8K and offline throughput, bf16 and fp8.
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/X $D/W; tar -xJf $D/X.tar.xz -C $D/X; tar -xJf $D/W.tar.xz -C $D/W
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/W/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make30.log 2>&1 &
MK=$!
log "tests"
timeout 240 $D/W/test_cuda --gtest_filter='CudaMoe*:MoeDecode.*:CudaFp8MoeEngine.*:CudaMoeEngine.*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|tests ran|^\[       OK" $OUT/tests.log | head -40; grep -B2 -A10 Failure $OUT/tests.log | head -40
log "memcheck"
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $D/W/test_cuda --gtest_filter='CudaMoe.ExpertsTiledKernelMatchesTheReference' > $OUT/memcheck.log 2>&1; echo "memcheck rc $?"
tail -3 $OUT/memcheck.log
log "rate"
timeout 100 $D/W/test_cuda --gtest_also_run_disabled_tests --gtest_filter='MoeGemmBench.*' 2>&1 | grep -E "^moe tiled|FAIL" | tee $OUT/rate.log
wait $MK; echo "make rc $?"
for b in X W; do
  for q in none fp8; do
    log "prefill $b $q"
    timeout 100 $D/$b/nanovllm bench latency --backend cuda --model /tmp/q30 --quantization $q --context 1024 --decode-tokens 16 --prefill 8192 2>&1 | grep -E "^prefill|^decode" | tee -a $OUT/lat.log
  done
done
for b in X W; do
  for q in none fp8; do
    log "throughput $b $q"
    timeout 150 $D/$b/nanovllm bench throughput --backend cuda --model /tmp/q30 --quantization $q --num-seqs 256 --min-input 512 --max-input 512 --min-output 512 --max-output 512 > $OUT/tput_${b}_$q.log 2>&1
    grep -iE "tok/s|roofline" $OUT/tput_${b}_$q.log | head -4
  done
done
log done

# ## call5 {#call5}
#!/bin/bash
# s44 call 5 (one H200): W2 = call 4's W + each thread fences its landed shared-memory copies to the async proxy before
# the barrier (fence.proxy.async.shared::cta; the fp8 kernel's dequantized B tiles were read stale). Tiled-GEMM tests x3,
# the MoE engine tests, the tiled rate, then 30B-A3B (24 layers) prefill 8K and offline throughput, bf16 and fp8.
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/W; tar -xJf $D/W.tar.xz -C $D/W
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/W/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make30.log 2>&1 &
MK=$!
log "tests"
timeout 200 $D/W/test_cuda --gtest_repeat=3 --gtest_filter='CudaMoe.ExpertsTiledKernelMatchesTheReference:CudaMoe.SparseMlp*:CudaMoe.OutputIsBitwiseDeterministic' > $OUT/tests.log 2>&1; echo "tests rc $?"
timeout 100 $D/W/test_cuda --gtest_filter='CudaFp8MoeEngine.*:CudaMoeEngine.*' >> $OUT/tests.log 2>&1; echo "engine tests rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED" $OUT/tests.log | head -20; grep -B2 -A6 Failure $OUT/tests.log | head -30
log "rate"
timeout 100 $D/W/test_cuda --gtest_also_run_disabled_tests --gtest_filter='MoeGemmBench.*' 2>&1 | grep -E "^moe tiled|FAIL" | tee $OUT/rate.log
wait $MK; echo "make rc $?"
for q in none fp8; do
  log "prefill $q"
  timeout 100 $D/W/nanovllm bench latency --backend cuda --model /tmp/q30 --quantization $q --context 1024 --decode-tokens 16 --prefill 8192 2>&1 | grep -E "^prefill|^decode" | tee -a $OUT/lat.log
done
for q in none fp8; do
  log "throughput $q"
  timeout 150 $D/W/nanovllm bench throughput --backend cuda --model /tmp/q30 --quantization $q --num-seqs 256 --min-input 512 --max-input 512 --min-output 512 --max-output 512 > $OUT/tput_$q.log 2>&1
  grep -iE "tok/s|roofline" $OUT/tput_$q.log | head -4
done
log done

# ## call6 {#call6}
#!/bin/bash
# s44 call 6 (two H200s of one host): W3 = 44a2930 (the wgmma tiled GEMM as committed). The MoE engine tests on two
# GPUs (TP 2: a rank's Im share through the tiled GEMM), then 30B-A3B (24 layers) prefill 8K at TP 1 and TP 2.
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/W; tar -xJf $D/W.tar.xz -C $D/W
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/W/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make30.log 2>&1 &
MK=$!
log "tests"
timeout 150 $D/W/test_cuda --gtest_filter='CudaMoeEngine.*:CudaFp8MoeEngine.*:CudaMoe.ExpertsTiledKernelMatchesTheReference' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|^\[       OK" $OUT/tests.log | head -20; grep -B2 -A6 Failure $OUT/tests.log | head -30
wait $MK; echo "make rc $?"
for tp in 1 2; do
  log "prefill tp=$tp"
  timeout 120 $D/W/nanovllm bench latency --backend cuda --model /tmp/q30 --tensor-parallel-size $tp --context 1024 --decode-tokens 16 --prefill 8192 2>&1 | grep -E "^prefill|^decode" | tee -a $OUT/lat.log
done
log done

# ## call7 {#call7}
#!/bin/bash
# s44 call 7 (one H200): V = 5th commit of the session (the tiled kernels' shared B-row map and pair store, a
# refactor): the MoE kernel tests (both tiled kernels), the MoE engine tests, the tiled rate.
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/V; tar -xJf $D/V.tar.xz -C $D/V
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
log "tests"
timeout 200 $D/V/test_cuda --gtest_filter='CudaMoe.*:CudaMoeEngine.*:CudaFp8MoeEngine.*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED" $OUT/tests.log | head -20; grep -B2 -A6 Failure $OUT/tests.log | head -30
log "rate"
timeout 100 $D/V/test_cuda --gtest_also_run_disabled_tests --gtest_filter='MoeGemmBench.*' 2>&1 | grep -E "^moe tiled|FAIL" | tee $OUT/rate.log
log done
