#!/usr/bin/env bash
# Session 39 (2026-11-29): the scripts of its device calls, one section per call under "# ## <name> {#id}"; they
# ran from the repository root with the stripped builds in .carry/ (call 1: bin.tar.xz = nanovllm + test_cuda of
# branch fp8mma at 7bdf46f + libcupti.so.13; calls 2-6: A.tar.xz = f223d33, B.tar.xz = A + the MoE prefetch variant
# (not committed), C.tar.xz = fd084bc, the early trigger off outside graphs; libcupti.so.13.xz from the CUDA 13
# toolkit). Run one section with
#   bash bench/results/2026-11-29/s39/calls.sh ID [ARGS...]
# (no ID lists them).
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## call1 {#call1}
#!/bin/bash
# s39 call 1: fp8 GEMV on tensor cores (tests, per-shape A/B of the three arithmetics, bs=1 decode 0.6B / 8B bf16
# vs fp8), the parametrised estimator tests, and the 30B-A3B (24 layers) bs=1 step timeline (CUPTI).
set -u
D=.carry
tar -xJf $D/bin.tar.xz -C $D
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
B=$D/nanovllm; T=$D/test_cuda
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
($B make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 >/dev/null; $B make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 > /dev/null) &
MK=$!
log tests
timeout 240 $T --gtest_filter='CudaFp8Linear.*:CudaFp8Engine.*:CudaPatternEstimators*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^\[  SKIPPED" $OUT/tests.log | head -20
log shapes
timeout 150 $T --gtest_also_run_disabled_tests --gtest_filter='CudaFp8Bench.DISABLED_DecodeShapes' > $OUT/shapes.log 2>&1; echo "shapes rc $?"
wait $MK
for m in q06 q8; do for q in none fp8 none fp8; do
  log "latency $m $q"
  timeout 60 $B bench latency --backend cuda --model /tmp/$m --quantization $q --context 1024 --decode-tokens 32 --skip-prefill 2>&1 | grep -E "decode bs|rror" | tee -a $OUT/latency.log
done; done
rm -rf /tmp/q8
log moe24
$B make-test-model --out /tmp/moe24 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > /dev/null
timeout 60 $B bench latency --backend cuda --model /tmp/moe24 --context 1024 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "decode bs|rror" | tee -a $OUT/latency.log
NANOVLLM_STEP_TIMELINE_MODEL=/tmp/moe24 timeout 120 $T --gtest_also_run_disabled_tests \
  --gtest_filter='CudaStepTimelineBench.DISABLED_DecodeBatchOne' > $OUT/moe_timeline.log 2>&1; echo "timeline rc $?"
sed -n '/one step:/,$p' $OUT/moe_timeline.log | head -30
log done

# ## call2 {#call2}
#!/bin/bash
# s39 call 2: MoE bs=1 decode, A = f223d33 vs B = + the router's L2 prefetch of the chosen experts' gate_up (1 MiB
# each) and the down kernel's expert rows requested (and its first step loaded) before its wait: MoE device tests on
# B, the per-layer A/B bench on both, 24-layer bs=1 latency alternating; then the offloaded Quest step's CUPTI
# timeline (4B YaRN, fp8 KV, avgpool prefill) for 1 and 4 requests of 128K (binary A).
set -u
D=.carry
mkdir -p $D/A $D/B
tar -xJf $D/A.tar.xz -C $D/A; tar -xJf $D/B.tar.xz -C $D/B; xz -dkf $D/libcupti.so.13.xz
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
($D/A/nanovllm make-test-model --out /tmp/moe24 --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' > /dev/null
 $D/A/nanovllm make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 \
    --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null) &
MK=$!
log "B: MoE tests"
timeout 200 $D/B/test_cuda --gtest_filter='CudaMoe*:MoeDecode*' > $OUT/moe_tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^\[  SKIPPED" $OUT/moe_tests.log | head
for v in A B B A; do
  log "$v: per-layer bench"
  timeout 60 $D/$v/test_cuda --gtest_also_run_disabled_tests --gtest_filter='MoeDecodeBench.*' 2>&1 | grep -E "T= 1|T= 2" | tee -a $OUT/moe_bench_$v.log
done
wait $MK
for r in 1 2 3; do for v in A B; do
  log "$v: moe24 latency"
  timeout 60 $D/$v/nanovllm bench latency --backend cuda --model /tmp/moe24 --context 1024 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "decode bs|rror" | tee -a $OUT/moe_lat_$v.log
done; done
rm -rf /tmp/moe24
for n in 1 4; do
  log "offloaded timeline, $n x 128K, fp8"
  NANOVLLM_STEP_TIMELINE_MODEL=/tmp/q4-yarn NANOVLLM_STEP_TIMELINE_SEQS=$n NANOVLLM_STEP_TIMELINE_KV_DTYPE=fp8 \
    NANOVLLM_STEP_TIMELINE_FAST_PREFILL=1 timeout 200 $D/A/test_cuda --gtest_also_run_disabled_tests \
    --gtest_filter='CudaStepTimelineBench.DISABLED_OffloadedQuestDecode' > $OUT/off_timeline_$n.log 2>&1; echo "rc $?"
  grep -E "steps; step-to-step" $OUT/off_timeline_$n.log
  sed -n '/one step:/,$p' $OUT/off_timeline_$n.log | head -40
done
log done

# ## call3 {#call3}
#!/bin/bash
# s39 call 3 (binary A = f223d33): where the offloaded Quest step's MLP time goes. 4B YaRN: resident bs=1 decode
# @1K (debug log: the in-graph linear tuning), its step timeline with PDL off (true kernel durations); the offloaded
# step (1 x 128K, fp8 KV, avgpool prefill) timeline with PDL off and on.
set -u
D=.carry
mkdir -p $D/A; tar -xJf $D/A.tar.xz -C $D/A; xz -dkf $D/libcupti.so.13.xz
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/A/nanovllm make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 \
  --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null
log "resident bs=1 latency, debug"
NANOVLLM_LOG_LEVEL=debug timeout 90 $D/A/nanovllm bench latency --backend cuda --model /tmp/q4-yarn --context 1024 \
  --decode-tokens 64 --skip-prefill > $OUT/q4_lat_debug.log 2>&1
grep -E "decode bs|linear N=" $OUT/q4_lat_debug.log | head -30
for pdl in 0 1; do
  log "resident timeline PDL=$pdl"
  NANOVLLM_PDL=$pdl NANOVLLM_STEP_TIMELINE_MODEL=/tmp/q4-yarn timeout 120 $D/A/test_cuda --gtest_also_run_disabled_tests \
    --gtest_filter='CudaStepTimelineBench.DISABLED_DecodeBatchOne' > $OUT/res_timeline_pdl$pdl.log 2>&1; echo "rc $?"
  sed -n '/one step:/,/OK/p' $OUT/res_timeline_pdl$pdl.log | head -24
done
log "offloaded timeline 1 x 128K fp8, PDL=0"
NANOVLLM_PDL=0 NANOVLLM_STEP_TIMELINE_MODEL=/tmp/q4-yarn NANOVLLM_STEP_TIMELINE_SEQS=1 NANOVLLM_STEP_TIMELINE_KV_DTYPE=fp8 \
  NANOVLLM_STEP_TIMELINE_FAST_PREFILL=1 NANOVLLM_LOG_LEVEL=debug timeout 200 $D/A/test_cuda --gtest_also_run_disabled_tests \
  --gtest_filter='CudaStepTimelineBench.DISABLED_OffloadedQuestDecode' > $OUT/off_timeline_pdl0.log 2>&1; echo "rc $?"
grep -E "steps; step-to-step" $OUT/off_timeline_pdl0.log
sed -n '/one step:/,/OK/p' $OUT/off_timeline_pdl0.log | head -30
grep -E "linear N=" $OUT/off_timeline_pdl0.log | head -20
log done

# ## call4 {#call4}
#!/bin/bash
# s39 call 4 (binary A = f223d33): the offloaded Quest step (4B YaRN, 128K, fp8 KV, avgpool budget 4096 + layer 0
# dense prefill, Quest 2048) under PDL on (default) / off (NANOVLLM_PDL=0) / early norm trigger off, alternating;
# the GPU page cache at 32768 tokens; 4 requests PDL on / off.
set -u
D=.carry
mkdir -p $D/A; tar -xJf $D/A.tar.xz -C $D/A
B=$D/A/nanovllm
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$B make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 \
  --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
lanes() {  # lanes NAME N [ENV=...] -- [ARGS...]
  local name=$1 n=$2; shift 2; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$SECONDS
  echo "== $name: $n x 128K fp8 ${envs[*]} $*" | tee -a $OUT/lanes.log
  env "${envs[@]}" timeout 150 $B bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --output-len 48 \
    --no-compare --sparse-policy quest --sparse-budget 2048 --concurrency $n --kv-cache-dtype fp8 "${SP[@]}" "$@" 2>&1 |
    grep -E "^(context|peak)" | grep -E "decode|hit rate" | tee -a $OUT/lanes.log
  echo "rc ${PIPESTATUS[0]} ($((SECONDS - t0)) s)" | tee -a $OUT/lanes.log
}
for r in 1 2; do
  lanes pdl_on 1 X=1 --
  lanes pdl_off 1 NANOVLLM_PDL=0 --
  lanes early_off 1 NANOVLLM_PDL_EARLY_NORM=0 --
done
lanes cache32k_pdl_on 1 X=1 -- --sparse-gpu-cache-tokens 32768
lanes cache32k_pdl_off 1 NANOVLLM_PDL=0 -- --sparse-gpu-cache-tokens 32768
lanes pdl_on 4 X=1 --
lanes pdl_off 4 NANOVLLM_PDL=0 --
log done

# ## call5 {#call5}
#!/bin/bash
# s39 call 5: the RMSNorm early trigger off outside decode graphs (C = f223d33 + that default) against A = f223d33:
# C's PDL / decode-fusion / offload device tests; the offloaded Quest step (4B YaRN, 128K, fp8 KV, avgpool budget
# 4096 + layer 0 dense prefill, Quest 2048) for 1 request (A, C, A, C), 4 requests (A, C) and 8 (C, host pool
# capped at 80 GiB).
set -u
D=.carry
mkdir -p $D/A $D/C; tar -xJf $D/A.tar.xz -C $D/A; tar -xJf $D/C.tar.xz -C $D/C
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/A/nanovllm make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 \
  --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null &
MK=$!
log "C: tests"
timeout 150 $D/C/test_cuda --gtest_filter='CudaDecodePdl.*:CudaDecodeFusion.*:CudaOffload*:*OffloadSparse*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^\[  SKIPPED" $OUT/tests.log | head
wait $MK
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
lanes() {  # lanes BIN N [ARGS...]
  local v=$1 n=$2; shift 2; local t0=$SECONDS
  echo "== $v: $n x 128K fp8 $*" | tee -a $OUT/lanes.log
  timeout 150 $D/$v/nanovllm bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --output-len 48 \
    --no-compare --sparse-policy quest --sparse-budget 2048 --concurrency $n --kv-cache-dtype fp8 "${SP[@]}" "$@" 2>&1 |
    grep -E "^(context|peak)" | grep -E "decode|hit rate" | tee -a $OUT/lanes.log
  echo "rc ${PIPESTATUS[0]} ($((SECONDS - t0)) s)" | tee -a $OUT/lanes.log
}
lanes A 1; lanes C 1; lanes A 1; lanes C 1
lanes A 4; lanes C 4
lanes C 8 --cpu-memory-limit 80
log done

# ## call6 {#call6}
#!/bin/bash
# s39 call 6: the whole CUDA suite on C (refactor at fd084bc, the tree that lands; later commits are docs).
set -u
D=.carry
mkdir -p $D/C; tar -xJf $D/C.tar.xz -C $D/C
export NANOVLLM_TEST_DATA=$PWD/tests/data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
t0=$SECONDS
timeout 330 $D/C/test_cuda > $OUT/tests_full.log 2>&1; echo "test_cuda rc $? ($((SECONDS - t0)) s)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^\[  SKIPPED|tests ran" $OUT/tests_full.log | head -20
