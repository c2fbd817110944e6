#!/usr/bin/env bash
# Session 40 (2026-11-29): the scripts of its device calls, one section per call under "# ## <name> {#id}"; they
# ran from the repository root with the stripped builds in .carry/ (calls 1-3: A.tar.xz / B.tar.xz = nanovllm +
# test_cuda of 9089ac5 + the KV-dtype block-sparse test (A), + gate/up K parts as a kernel argument with 2 picked
# (B); call 4: C.tar.xz = 4618c63 (4 or 8 parts picked, TP floors, the 16-selection cache); call 5: C and A2 =
# C's nanovllm with the pick forced to 2 parts; libcupti.so.13.xz from the CUDA 13 toolkit). Calls 1, 2, 4 and 5
# ran on 2 x H200 (nvidia-h200-x2), call 3 on one H200. Run one section with
#   bash bench/results/2026-11-29/s40/calls.sh ID [ARGS...]
# (no ID lists them).
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## call1 {#call1}
#!/bin/bash
# s40 call 1 (2 x H200): the block-sparse full-pattern test over both KV dtypes; issue 49's TP check
# (scripts/bench/moe_tp_check.sh 2: 30B-A3B, 48 layers, bs=1 at TP 1 and TP 2 alternating).
set -u; D=.carry; mkdir -p $D/bin; tar -xJf $D/A.tar.xz -C $D/bin; export NANOVLLM_TEST_DATA=$PWD/tests/data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt; nproc; free -g | head -2; df -h /tmp | tail -1
timeout 60 $D/bin/test_cuda --gtest_filter='*FullPatternEqualsPagedAttention*' 2>&1 | grep -E "^\[ +(OK|FAILED|PASSED|SKIPPED)" | tee $OUT/blocksparse.log
mkdir -p $D/bld/tools; cp $D/bin/nanovllm $D/bld/tools/
OUT=$OUT/moe timeout 500 bash scripts/bench/moe_tp_check.sh 2 $D/bld 2>&1 | tail -40

# ## call2 {#call2}
#!/bin/bash
# s40 call 2 (2 x H200): issue 51's unmeasured targets (scripts/bench/fp8_targets_check.sh: the 32B-shape FP8 KV
# capacity, greedy agreement with HF fp32 on the dequantized weights) beside a TP 2 / 1 / 2 rerun of 30B-A3B at 24
# layers with the info log. They ran at once on GPU 0 (a mistake): the third TP run found no memory, and the 32B
# shape's bs=1 time (14.7 ms) and the TP numbers shared the GPU, so only the capacity and agreement count.
set -u; D=.carry; mkdir -p $D/bin $D/bld/tools; tar -xJf $D/A.tar.xz -C $D/bin; cp $D/bin/nanovllm $D/bld/tools/; export NANOVLLM_TEST_DATA=$PWD/tests/data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
(OUT=$OUT/fp8 timeout 420 bash scripts/bench/fp8_targets_check.sh $D/bld > $OUT/fp8_script.log 2>&1) &
F=$!
$D/bin/nanovllm make-test-model --out /tmp/q30a3b --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}' >/dev/null
for tp in 2 1 2; do echo "== tp $tp"; NANOVLLM_LOG_LEVEL=info timeout 90 $D/bin/nanovllm bench latency --backend cuda --model /tmp/q30a3b --tensor-parallel-size $tp --context 1024 --decode-tokens 64 --skip-prefill 2>&1 | tail -12 | tee -a $OUT/moe_tp_info.log; nvidia-smi --query-gpu=index,memory.used --format=csv,noheader; done
wait $F; tail -30 $OUT/fp8_script.log

# ## call3 {#call3}
#!/bin/bash
# s40 call 3 (one H200): the MoE gate/up kernel's K parts (tests; per-rank-shape bench at TP 1/2/4); issue 47's
# offloaded Quest step with a 32K-token GPU page cache against the default (8K), 1 request alternating, then 4 and
# 8 requests.
set -u
D=.carry
mkdir -p $D/B; tar -xJf $D/B.tar.xz -C $D/B
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/B/nanovllm make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 \
  --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null &
MK=$!
log "B: MoE decode tests"
timeout 120 $D/B/test_cuda --gtest_filter='MoeDecode.*:CudaMoe*' > $OUT/moe_tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^\[  SKIPPED" $OUT/moe_tests.log | head
log "B: gate_up K parts"
timeout 90 $D/B/test_cuda --gtest_also_run_disabled_tests --gtest_filter='MoeDecodeBench.DISABLED_GateUpKParts' 2>&1 | grep -E "^gate_up|FAILED" | tee $OUT/kparts.log
wait $MK
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
lanes() {  # lanes N [ARGS...]
  local n=$1; shift; local t0=$SECONDS
  echo "== $n x 128K fp8 $*" | tee -a $OUT/lanes.log
  timeout 150 $D/B/nanovllm bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --output-len 48 \
    --no-compare --sparse-policy quest --sparse-budget 2048 --concurrency $n --kv-cache-dtype fp8 "${SP[@]}" "$@" 2>&1 |
    grep -E "^(context|peak)" | tee -a $OUT/lanes.log
  echo "rc ${PIPESTATUS[0]} ($((SECONDS - t0)) s)" | tee -a $OUT/lanes.log
}
C32=(--sparse-gpu-cache-tokens 32768)
lanes 1; lanes 1 "${C32[@]}"; lanes 1; lanes 1 "${C32[@]}"
lanes 4 "${C32[@]}"
lanes 8 --cpu-memory-limit 80 "${C32[@]}"
log done

# ## call4 {#call4}
#!/bin/bash
# s40 call 4 (2 x H200): C = 4618c63 (gate/up K parts picked, TP floors, 16-selection page cache default). MoE and
# offload device tests (two-GPU ones included); 30B-A3B (48 layers) bs=1 at TP 1 and TP 2 alternating; its TP1 step
# timeline with PDL off (true kernel durations); the offloaded Quest step with the new default cache (1 and 8
# requests) and 8 requests with a 64K-token cache.
set -u
D=.carry
mkdir -p $D/C; tar -xJf $D/C.tar.xz -C $D/C; xz -dkf $D/libcupti.so.13.xz
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
($D/C/nanovllm make-test-model --out /tmp/q30a3b --preset qwen3-30b-a3b --seed 1 > /dev/null
 $D/C/nanovllm make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 \
  --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null) &
MK=$!
log "C: tests"
timeout 200 $D/C/test_cuda --gtest_filter='MoeDecode.*:CudaMoe*:CudaOffload*:*OffloadSparse*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^\[  SKIPPED" $OUT/tests.log | head
wait $MK
for r in 1 2; do for tp in 1 2; do
  log "30B-A3B TP$tp"
  timeout 90 $D/C/nanovllm bench latency --backend cuda --model /tmp/q30a3b --tensor-parallel-size $tp --context 1024 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "decode bs|rror" | tee -a $OUT/moe_tp.log
done; done
log "30B-A3B TP1 timeline, PDL off"
NANOVLLM_PDL=0 NANOVLLM_STEP_TIMELINE_MODEL=/tmp/q30a3b timeout 120 $D/C/test_cuda --gtest_also_run_disabled_tests \
  --gtest_filter='CudaStepTimelineBench.DISABLED_DecodeBatchOne' > $OUT/moe_timeline.log 2>&1; echo "timeline rc $?"
sed -n '/one step:/,/OK/p' $OUT/moe_timeline.log | head -30
rm -rf /tmp/q30a3b
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
lanes() {  # lanes N [ARGS...]
  local n=$1; shift; local t0=$SECONDS
  echo "== $n x 128K fp8 $*" | tee -a $OUT/lanes.log
  timeout 150 $D/C/nanovllm bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --output-len 48 \
    --no-compare --sparse-policy quest --sparse-budget 2048 --concurrency $n --kv-cache-dtype fp8 "${SP[@]}" "$@" 2>&1 |
    grep -E "^(context|peak)" | grep -v "sparse prefill" | tee -a $OUT/lanes.log
  echo "rc ${PIPESTATUS[0]} ($((SECONDS - t0)) s)" | tee -a $OUT/lanes.log
}
lanes 1
lanes 8 --cpu-memory-limit 80
lanes 8 --cpu-memory-limit 80 --sparse-gpu-cache-tokens 65536
log done

# ## call5 {#call5}
#!/bin/bash
# s40 call 5 (2 x H200): the whole CUDA suite on C (4618c63, two-GPU tests included); then 30B-A3B (48 layers) bs=1,
# A2 (C with gate/up forced to 2 K parts: the kernel before this session) against C, TP 1 and TP 2, alternating.
set -u
D=.carry
mkdir -p $D/C $D/A2; tar -xJf $D/C.tar.xz -C $D/C; tar -xJf $D/A2.tar.xz -C $D/A2
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
log "C: whole suite"
t0=$SECONDS
timeout 330 $D/C/test_cuda > $OUT/tests_full.log 2>&1; echo "test_cuda rc $? ($((SECONDS - t0)) s)"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^\[  SKIPPED|tests ran" $OUT/tests_full.log | head -20
$D/C/nanovllm make-test-model --out /tmp/q30a3b --preset qwen3-30b-a3b --seed 1 > /dev/null
for tp in 1 2; do for v in A2 C A2 C; do
  log "$v: 30B-A3B TP$tp"
  timeout 90 $D/$v/nanovllm bench latency --backend cuda --model /tmp/q30a3b --tensor-parallel-size $tp --context 1024 --decode-tokens 64 --skip-prefill 2>&1 | grep -E "decode bs|rror" | tee -a $OUT/moe_ab.log
done; done
log done
