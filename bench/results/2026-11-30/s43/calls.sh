#!/usr/bin/env bash
# Session 43 (2026-11-30): the scripts of its device calls, one section per call under "# ## <name> {#id}"; they ran
# from the repository root on one H200 (call 6 on two, nvidia-h200-x2) with stripped builds in .carry/: A = 247ae12
# (+ the step timeline's quantization env), B = A + the fp8 GEMV kernels at the max shared-memory carveout
# (fp8_gemv_mma's too: dropped after call 2), C = A + that carveout for the one-token kernels only + gate_up and
# silu_mul in one register-fed kernel at every one-token step, D = 523049e (what landed: C with the fusion only under
# 16 MiB of weights), E = D + the max carveout on the bf16 GEMVs and the MoE decode kernels (call 5; lost, not
# kept), F = ec435c8's test_cuda, G = its nanovllm (bd23ef2's kernels), H = G + the MoE decode router's grouping by
# one warp (landed), H2 = H + the router's peers' logits through distributed shared memory (call 10; lost, not
# kept). Run one section with
#   bash bench/results/2026-11-30/s43/calls.sh ID [ARGS...]
# (no ID lists them).
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## call1 {#call1}
#!/bin/bash
# s43 call 1 (one H200): A = 247ae12 (+ the timeline's quantization env). CUPTI bs=1 step timelines, bf16 vs fp8
# weights, 8B shape (12 layers) and 0.6B; bench latency of each, same call.
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/A; tar -xJf $D/A.tar.xz -C $D/A; xz -dk $D/libcupti.so.13.xz
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/A/nanovllm make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 --config-override '{"num_hidden_layers": 12}' > $OUT/make8.log 2>&1
$D/A/nanovllm make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 > $OUT/make06.log 2>&1
for m in q8 q06; do for q in none fp8; do
  log "timeline $m $q"
  NANOVLLM_STEP_TIMELINE_MODEL=/tmp/$m NANOVLLM_STEP_TIMELINE_QUANTIZATION=$q timeout 120 $D/A/test_cuda --gtest_also_run_disabled_tests \
    --gtest_filter='CudaStepTimelineBench.DISABLED_DecodeBatchOne' > $OUT/tl_${m}_$q.log 2>&1; echo "rc $?"
  sed -n '/^one step/,$p' $OUT/tl_${m}_$q.log | head -30
done; done
for m in q8 q06; do for q in none fp8 none fp8; do
  log "lat $m $q"
  timeout 100 $D/A/nanovllm bench latency --backend cuda --model /tmp/$m --quantization $q --context 1024 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "^decode" | tee -a $OUT/lat.log
done; done
log done

# ## call2 {#call2}
#!/bin/bash
# s43 call 2 (one H200): A = 247ae12 (nanovllm), B = A + the fp8 GEMV kernels prefer the max shared-memory carveout.
# fp8 GEMV tests on B; CUPTI bs=1 timelines on B (8B 12 layers, 0.6B, fp8); bench latency A vs B alternating.
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/A $D/B; tar -xJf $D/A.tar.xz -C $D/A; tar -xJf $D/B.tar.xz -C $D/B; xz -dk $D/libcupti.so.13.xz
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
( $D/A/nanovllm make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 --config-override '{"num_hidden_layers": 12}' > $OUT/make8.log 2>&1
  $D/A/nanovllm make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 > $OUT/make06.log 2>&1
  $D/A/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make30.log 2>&1 ) &
MK=$!
log "B tests"
timeout 150 $D/B/test_cuda --gtest_filter='CudaFp8*:CudaDecodePdl*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/tests.log | head -20
wait $MK; echo "make rc $?"
for m in q8 q06; do
  log "timeline B $m fp8"
  NANOVLLM_STEP_TIMELINE_MODEL=/tmp/$m NANOVLLM_STEP_TIMELINE_QUANTIZATION=fp8 timeout 120 $D/B/test_cuda --gtest_also_run_disabled_tests \
    --gtest_filter='CudaStepTimelineBench.DISABLED_DecodeBatchOne' > $OUT/tl_${m}_fp8_B.log 2>&1; echo "rc $?"
  sed -n '/^one step/,$p' $OUT/tl_${m}_fp8_B.log | head -12
done
lat() {  # lat BIN MODEL QUANT BATCH
  log "$1 $2 batch $4 quant=$3"
  timeout 100 $D/$1/nanovllm bench latency --backend cuda --model /tmp/$2 --quantization $3 --context 1024 --batch $4 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "^decode" | tee -a $OUT/lat.log
}
for m in q8 q06; do
  lat A $m none 1; lat A $m fp8 1; lat B $m fp8 1; lat A $m fp8 1; lat B $m fp8 1
done
lat A q8 fp8 8; lat B q8 fp8 8; lat A q8 none 8; lat A q8 fp8 8; lat B q8 fp8 8
lat A q30 fp8 1; lat B q30 fp8 1; lat A q30 none 1; lat A q30 fp8 1; lat B q30 fp8 1
log done

# ## call3 {#call3}
#!/bin/bash
# s43 call 3 (one H200): B = 247ae12 + fp8 GEMVs prefer the max shared carveout (nanovllm); C = B + gate_up and
# silu_mul in one register-fed fp8 kernel at one token (always). Tests + memcheck on C; latency B vs C alternating.
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/B $D/C; tar -xJf $D/B.tar.xz -C $D/B; tar -xJf $D/C.tar.xz -C $D/C; xz -dk $D/libcupti.so.13.xz
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
( $D/B/nanovllm make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 --config-override '{"num_hidden_layers": 12}' > $OUT/make8.log 2>&1
  $D/B/nanovllm make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 > $OUT/make06.log 2>&1 ) &
MK=$!
log "C tests"
timeout 150 $D/C/test_cuda --gtest_filter='CudaFp8*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/tests.log | head -20; grep -A8 Failure $OUT/tests.log | head -30
log memcheck
timeout 100 compute-sanitizer --tool memcheck $D/C/test_cuda --gtest_filter='CudaFp8Linear.GateUpSilu*' > $OUT/memcheck.log 2>&1; echo "rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -4
wait $MK; echo "make rc $?"
lat() {  # lat BIN MODEL QUANT BATCH
  log "$1 $2 batch $4 quant=$3"
  timeout 100 $D/$1/nanovllm bench latency --backend cuda --model /tmp/$2 --quantization $3 --context 1024 --batch $4 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "^decode" | tee -a $OUT/lat.log
}
for m in q06 q8; do
  lat B $m fp8 1; lat C $m fp8 1; lat B $m fp8 1; lat C $m fp8 1; lat B $m none 1
done
log "timeline C q8 fp8"
NANOVLLM_STEP_TIMELINE_MODEL=/tmp/q8 NANOVLLM_STEP_TIMELINE_QUANTIZATION=fp8 timeout 120 $D/C/test_cuda --gtest_also_run_disabled_tests \
  --gtest_filter='CudaStepTimelineBench.DISABLED_DecodeBatchOne' > $OUT/tl_q8_fp8_C.log 2>&1; echo "rc $?"
sed -n '/^one step/,$p' $OUT/tl_q8_fp8_C.log | head -12
log done

# ## call4 {#call4}
#!/bin/bash
# s43 call 4 (one H200): A = 247ae12 (nanovllm), D = 523049e (fp8 GEMVs at the max carveout; gate_up + silu fused at
# one token under 16 MiB). Tests on D (fp8, MoE, PDL; memcheck of the fused kernel); bs=1 decode A vs D and bf16:
# the 8B preset (36 layers), 0.6B, 30B-A3B (24 layers).
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/A $D/D; tar -xJf $D/A.tar.xz -C $D/A; tar -xJf $D/D.tar.xz -C $D/D
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
( $D/A/nanovllm make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 > $OUT/make8.log 2>&1
  $D/A/nanovllm make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 > $OUT/make06.log 2>&1
  $D/A/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make30.log 2>&1 ) &
MK=$!
log "D tests"
timeout 240 $D/D/test_cuda --gtest_filter='CudaFp8*:CudaDecodePdl*:CudaMoe*:MoeDecode.*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/tests.log | head -20; grep -A8 Failure $OUT/tests.log | head -30
log memcheck
timeout 100 compute-sanitizer --tool memcheck $D/D/test_cuda --gtest_filter='CudaFp8Linear.GateUpSilu*:CudaFp8Linear.GemvMatches*' > $OUT/memcheck.log 2>&1; echo "rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.log | head -4
wait $MK; echo "make rc $?"; du -sh /tmp/q8
lat() {  # lat BIN MODEL QUANT
  log "$1 $2 quant=$3"
  timeout 150 $D/$1/nanovllm bench latency --backend cuda --model /tmp/$2 --quantization $3 --context 1024 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "^decode" | tee -a $OUT/lat.log
}
for m in q8 q06; do
  lat A $m none; lat A $m fp8; lat D $m fp8; lat D $m none; lat A $m fp8; lat D $m fp8
done
lat A q30 fp8; lat D q30 fp8; lat D q30 none
log done

# ## call5 {#call5}
#!/bin/bash
# s43 call 5 (one H200): D = 523049e (nanovllm), E = D + the max shared-memory carveout on the bf16 register-fed and
# stream-K GEMVs and the MoE decode kernels (branch dev-carveout, an experiment). bf16 decode latency D vs E
# alternating: 8B (12 layers) bs=1 and batch 8, 0.6B bs=1, 30B-A3B (24 layers) bs=1; CUPTI timelines on E.
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/D $D/E; tar -xJf $D/D.tar.xz -C $D/D; tar -xJf $D/E.tar.xz -C $D/E; xz -dk $D/libcupti.so.13.xz
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/D/nanovllm make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 --config-override '{"num_hidden_layers": 12}' > $OUT/make8.log 2>&1
$D/D/nanovllm make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 > $OUT/make06.log 2>&1
( $D/D/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make30.log 2>&1 ) &
MK=$!
lat() {  # lat BIN MODEL BATCH
  log "$1 $2 batch $3 bf16"
  timeout 100 $D/$1/nanovllm bench latency --backend cuda --model /tmp/$2 --quantization none --context 1024 --batch $3 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "^decode" | tee -a $OUT/lat.log
}
lat D q8 1; lat E q8 1; lat D q8 1; lat E q8 1
lat D q06 1; lat E q06 1; lat D q06 1; lat E q06 1
lat D q8 8; lat E q8 8; lat D q8 8; lat E q8 8
log "timeline E q8 bf16"
NANOVLLM_STEP_TIMELINE_MODEL=/tmp/q8 timeout 120 $D/E/test_cuda --gtest_also_run_disabled_tests \
  --gtest_filter='CudaStepTimelineBench.DISABLED_DecodeBatchOne' > $OUT/tl_q8_E.log 2>&1; echo "rc $?"
sed -n '/^one step/,$p' $OUT/tl_q8_E.log | head -12
wait $MK; echo "make rc $?"
lat D q30 1; lat E q30 1; lat D q30 1; lat E q30 1
log done

# ## call6 {#call6}
#!/bin/bash
# s43 call 6 (two H200s, nvidia-h200-x2): F = ec435c8's test_cuda. The fp8 and MoE engine tests on two GPUs (tensor
# parallel 2 with the fused gate_up + silu kernel at one token), the fp8 kernel tests.
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/F; tar -xJf $D/F.tar.xz -C $D/F
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
timeout 330 $D/F/test_cuda --gtest_filter='CudaFp8Engine*:CudaFp8MoeEngine*:CudaFp8Linear.GateUp*:CudaMoeEngine*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED|tests ran" $OUT/tests.log | head -20; grep -A8 Failure $OUT/tests.log | head -30
grep -E "agree|TP 2|two GPUs|steps" $OUT/tests.log | head -20
log done

# ## call7 {#call7}
#!/bin/bash
# s43 call 7 (one H200): F = ec435c8's test_cuda, G = its nanovllm. CUPTI bs=1 step timelines of the 30B-A3B shape
# (24 layers), bf16 and fp8 (for issue 49's bs=1 account: one MoE layer's records).
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/F $D/G; tar -xJf $D/F.tar.xz -C $D/F; tar -xJf $D/G.tar.xz -C $D/G; xz -dk $D/libcupti.so.13.xz
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/G/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make30.log 2>&1
for q in none fp8; do
  log "timeline q30 $q"
  NANOVLLM_STEP_TIMELINE_MODEL=/tmp/q30 NANOVLLM_STEP_TIMELINE_QUANTIZATION=$q timeout 150 $D/F/test_cuda --gtest_also_run_disabled_tests \
    --gtest_filter='CudaStepTimelineBench.DISABLED_DecodeBatchOne' > $OUT/tl_q30_$q.log 2>&1; echo "rc $?"
  sed -n '/^one step/,$p' $OUT/tl_q30_$q.log | head -14
  sed -n '/step end/,/one step/p' $OUT/tl_q30_$q.log | head -16
done
log done

# ## call8 {#call8}
#!/bin/bash
# s43 call 8 (one H200): F = ec435c8's test_cuda. Nsight Compute on the MoE decode router kernel (30B-A3B shape,
# MoeDecodeBench's one layer): its duration alone and where its warps stall (issue 49's bs=1 lead).
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/F; tar -xJf $D/F.tar.xz -C $D/F
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
which ncu || ls /usr/local/cuda/bin | grep -i ncu
log ncu
timeout 200 ncu --kernel-name regex:moe_router_decode_kernel --launch-skip 2 --launch-count 3 \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section SourceCounters \
  $D/F/test_cuda --gtest_also_run_disabled_tests --gtest_filter='MoeDecodeBench.DISABLED_FusedVsUnfused' > $OUT/ncu_router.log 2>&1
echo "ncu rc $?"
grep -E "Duration|Elapsed Cycles|Registers Per|Block Size|Grid Size|Stall|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps|Achieved Occ|Memory Throughput|DRAM Through" $OUT/ncu_router.log | head -40
log done

# ## call9 {#call9}
#!/bin/bash
# s43 call 9 (one H200): G = bd23ef2 (nanovllm), H = G + the decode router groups at most 32 pairs with one warp
# (group_pairs_warp; no block barriers). MoE decode tests on H; 30B-A3B (24 layers) bs=1 latency G vs H alternating.
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/G $D/H; tar -xJf $D/G.tar.xz -C $D/G; tar -xJf $D/H.tar.xz -C $D/H
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/G/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make30.log 2>&1 &
MK=$!
log "H tests"
timeout 120 $D/H/test_cuda --gtest_filter='MoeDecode.*:CudaMoeEngine.Graphs*:CudaFp8MoeEngine.Greedy*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/tests.log | head; grep -A8 Failure $OUT/tests.log | head -20
wait $MK; echo "make rc $?"
lat() {  # lat BIN QUANT
  log "$1 q30 $2"
  timeout 60 $D/$1/nanovllm bench latency --backend cuda --model /tmp/q30 --quantization $2 --context 1024 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "^decode" | tee -a $OUT/lat.log
}
lat G none; lat H none; lat G none; lat H none
log done

# ## call10 {#call10}
#!/bin/bash
# s43 call 10 (one H200): H = 8d1aa10's kernels (nanovllm), H2 = H + the decode router's CTA 0 reads the peers' logits
# through distributed shared memory (no __threadfence, no L2 round trip; a split cluster barrier keeps the peers
# until it has read). MoE decode tests on H2; 30B-A3B (24 layers) bs=1 latency H vs H2 alternating.
set -u
export PATH=$PATH:/usr/local/cuda/bin
D=.carry; mkdir -p $D/H $D/H2; tar -xJf $D/H.tar.xz -C $D/H; tar -xJf $D/H2.tar.xz -C $D/H2
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/H/nanovllm make-test-model --out /tmp/q30 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > $OUT/make30.log 2>&1 &
MK=$!
log "H2 tests"
timeout 100 $D/H2/test_cuda --gtest_filter='MoeDecode.*:CudaMoeEngine.Graphs*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/tests.log | head; grep -A8 Failure $OUT/tests.log | head -20
wait $MK; echo "make rc $?"
lat() {
  log "$1 q30 bf16"
  timeout 40 $D/$1/nanovllm bench latency --backend cuda --model /tmp/q30 --quantization none --context 1024 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "^decode" | tee -a $OUT/lat.log
}
lat H; lat H2; lat H; lat H2
log done
