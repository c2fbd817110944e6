#!/usr/bin/env bash
# Session 42 (2026-11-30): the scripts of its device calls, one section per call under "# ## <name> {#id}"; they
# ran from the repository root on one H200 (call 5 on two, nvidia-h200-x2) with stripped builds in .carry/: F = the fp8moe branch rebased on b3854c4
# (179b5d7: fp8 MoE experts, FMA streaming kernels up to 32 tokens), G = b6eb2c1's kernels (2-32 token steps on the
# tensor cores; built before that commit's clean-up of moe_fp8.cu), H = G + fp8_gemv_mma for 5-16 rows (2fc1e98
# with kFp8GemvMaxTokens 4), I = 2fc1e98. Run one section with
#   bash bench/results/2026-11-30/s42/calls.sh ID [ARGS...]
# (no ID lists them).
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## call1 {#call1}
#!/bin/bash
# s42 call 1 (one H200): F = fp8moe rebased on b3854c4. MoE tests x3, sanitizers on the fp8 expert kernels,
# per-layer decode bench bf16 vs fp8, 30B-A3B (24 layers) bs=1 bf16 vs fp8 experts (quantized at load).
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/F; tar -xJf $D/F.tar.xz -C $D/F
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/F/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make.log 2>&1 &
MK=$!
log "tests x3"
timeout 200 $D/F/test_cuda --gtest_filter='CudaMoe*:MoeDecode.*:CudaFp8MoeEngine.*' --gtest_repeat=3 > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/tests.log | head -30
grep -B2 -A25 "Failure" $OUT/tests.log | head -80
log memcheck
timeout 150 compute-sanitizer --tool memcheck $D/F/test_cuda --gtest_filter='MoeDecode.GateUp*:MoeDecode.DownCombine*:CudaMoe.ExpertsWeightStreaming*' > $OUT/memcheck.log 2>&1; echo "rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head
log racecheck
timeout 120 compute-sanitizer --tool racecheck $D/F/test_cuda --gtest_filter='CudaMoe.ExpertsTiledKernelMatchesTheReference' > $OUT/racecheck.log 2>&1; echo "rc $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/racecheck.log | head; grep -m5 -A6 "Race reported\|Error:" $OUT/racecheck.log
log synccheck
timeout 90 compute-sanitizer --tool synccheck $D/F/test_cuda --gtest_filter='CudaMoe.ExpertsTiledKernelMatchesTheReference' > $OUT/synccheck.log 2>&1; echo "rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/synccheck.log | head
log "moe decode per layer"
timeout 90 $D/F/test_cuda --gtest_also_run_disabled_tests --gtest_filter='MoeDecodeBench.DISABLED_FusedVsUnfused' 2>&1 | grep -E "^moe decode|FAILED" | tee $OUT/moe_bench.log
wait $MK; echo "make rc $?"; tail -2 $OUT/make.log
for r in 1 2; do for q in none fp8; do
  log "30B-A3B 24L bs=1 quant=$q run $r"
  timeout 120 $D/F/nanovllm bench latency --backend cuda --model /tmp/q30 --quantization $q --context 1024 --decode-tokens 64 --skip-prefill > $OUT/lat_${q}_$r.log 2>&1; echo "rc $?"
  grep -E "decode bs=1|floor" $OUT/lat_${q}_$r.log | head -4
done; done
log done

# ## call2 {#call2}
#!/bin/bash
# s42 call 2 (one H200): F = fp8moe rebased (streaming FMA fp8 kernels for T <= 32), G = F + fp8 experts on the
# tensor-core moe_gemv for moe_experts' T <= 32 + test weights no larger than bf16's. Tests on G; per-layer MoE decode
# F vs G; 30B-A3B (24 layers) batch 8 decode and 8K prefill, bf16 vs fp8 experts, on G.
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/F $D/G; tar -xJf $D/F.tar.xz -C $D/F; tar -xJf $D/G.tar.xz -C $D/G
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/G/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make.log 2>&1 &
MK=$!
log "G tests"
timeout 200 $D/G/test_cuda --gtest_filter='CudaMoe*:MoeDecode.*:CudaFp8MoeEngine.*:CudaMoeEngine*:CudaFp8*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/tests.log | head -30
grep -A12 "Failure" $OUT/tests.log | head -60
log "memcheck G"
timeout 100 compute-sanitizer --tool memcheck $D/G/test_cuda --gtest_filter='CudaMoe.ExpertsWeightStreaming*' > $OUT/memcheck.log 2>&1; echo "rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -4
for b in F G F G; do
  log "$b: moe decode per layer"
  timeout 60 $D/$b/test_cuda --gtest_also_run_disabled_tests --gtest_filter='MoeDecodeBench.DISABLED_FusedVsUnfused' 2>&1 | grep -E "^moe decode fp8|FAILED" | tee -a $OUT/moe_bench_$b.log
done
wait $MK; echo "make rc $?"
for q in none fp8 none fp8; do
  log "G 30B-A3B 24L batch 8 quant=$q"
  timeout 100 $D/G/nanovllm bench latency --backend cuda --model /tmp/q30 --quantization $q --context 1024 --batch 8 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "decode" | tee -a $OUT/lat_b8_$q.log
done
for q in none fp8; do
  log "G 30B-A3B 24L prefill 8K quant=$q"
  timeout 100 $D/G/nanovllm bench latency --backend cuda --model /tmp/q30 --quantization $q --context 8192 --decode-tokens 4 2>&1 | grep -iE "prefill|decode" | tee -a $OUT/lat_pf_$q.log
done
log done

# ## call3 {#call3}
#!/bin/bash
# s42 call 3 (one H200): H = G + the fp8 linear's tensor-core GEMV for 5-16 rows (fp8_gemv_mma.cu), the shared
# fp8-on-mma warp step. Tests on H; the decode-batch projection bench; 30B-A3B (24 layers) and 8B (12 layers)
# batch 8 decode bf16 vs fp8 (H), and fp8 on G (quantize + GEMM at 8 rows).
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/G $D/H; tar -xJf $D/G.tar.xz -C $D/G; tar -xJf $D/H.tar.xz -C $D/H
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
( $D/H/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make30.log 2>&1
  $D/H/nanovllm make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 --config-override '{"num_hidden_layers": 12}' > $OUT/make8.log 2>&1 ) &
MK=$!
log "H tests"
timeout 240 $D/H/test_cuda --gtest_filter='CudaFp8*:CudaMoe*:MoeDecode.*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^\[  SKIPPED|tests ran" $OUT/tests.log | head -30
grep -A10 "Failure" $OUT/tests.log | head -50
log "memcheck H fp8 linear"
timeout 120 compute-sanitizer --tool memcheck $D/H/test_cuda --gtest_filter='CudaFp8Linear.GemvMatchesTheExactReference' > $OUT/memcheck.log 2>&1; echo "rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -4
log "decode batch shapes"
timeout 120 $D/H/test_cuda --gtest_also_run_disabled_tests --gtest_filter='CudaFp8Bench.DISABLED_DecodeBatchShapes' 2>&1 | grep -E " T |FAILED" | tee $OUT/batch_shapes.log
wait $MK; echo "make rc $?"
lat() {  # lat BIN MODEL QUANT BATCH
  log "$1 $2 batch $4 quant=$3"
  timeout 100 $D/$1/nanovllm bench latency --backend cuda --model $2 --quantization $3 --context 1024 --batch $4 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "^decode" | tee -a $OUT/lat.log
}
for m in /tmp/q30 /tmp/q8; do
  lat H $m none 8; lat H $m fp8 8; lat G $m fp8 8; lat H $m none 8; lat H $m fp8 8
done
lat H /tmp/q8 none 16; lat H /tmp/q8 fp8 16
log done

# ## call4 {#call4}
#!/bin/bash
# s42 call 4 (one H200): I = H with one-token FMA GEMVs only (kFp8GemvMaxTokens 1: 2-16 rows on fp8_gemv_mma).
# fp8 linear and engine tests; 0.6B offline throughput bf16 vs fp8 (alternating).
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/I; tar -xJf $D/I.tar.xz -C $D/I
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/I/nanovllm make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 > $OUT/make.log 2>&1 &
MK=$!
log "I tests"
timeout 200 $D/I/test_cuda --gtest_filter='CudaFp8Linear.*:CudaFp8Engine*:CudaFp8MoeEngine*:CudaMoe.Experts*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^\[  SKIPPED|tests ran|agree" $OUT/tests.log | head -30
grep -A10 "Failure" $OUT/tests.log | head -40
wait $MK
for q in none fp8 none fp8; do
  log "0.6B throughput $q"
  timeout 60 $D/I/nanovllm bench throughput --backend cuda --model /tmp/q06 --quantization $q 2>&1 | grep -E "throughput|roofline" | tee -a $OUT/thr.log
done
log done

# ## call5 {#call5}
#!/bin/bash
# s42 call 5 (2 x H200): I = 2fc1e98's test_cuda. The fp8 and bf16 MoE engines and the fp8 engine on one and two
# GPUs (tensor parallel 2: the experts' block scales sliced with their rows).
set -u
D=.carry; mkdir -p $D/I; tar -xJf $D/I.tar.xz -C $D/I
export NANOVLLM_TEST_DATA=$PWD/tests/data
echo "=== $(date +%T) card"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
timeout 150 $D/I/test_cuda --gtest_filter='CudaFp8MoeEngine.*:CudaMoeEngine.*:CudaFp8Engine.TwoGpus*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "agree|^\[  (PASSED|FAILED|SKIPPED|     OK) |^\[  FAILED" $OUT/tests.log | head -30
echo "=== $(date +%T) done"
