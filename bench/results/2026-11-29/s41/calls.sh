#!/usr/bin/env bash
# Session 41 (2026-11-29): the scripts of its device calls, one section per call under "# ## <name> {#id}"; they
# ran from the repository root with stripped builds in .carry/: A = 5d22a81 (main at the start; nanovllm only),
# B = 2dfbe78 (one copy kernel for the decode-buffer rows), B2 = 1f4d445 (+ the DCA engine test tied), C = 4b21fea
# (B2 + Quest scores on tensor cores + the fp8 MoE expert branch; its offload code is fd9107d's), D = 66eb150 (what
# landed for issue 47), Cmoe = C's test_cuda; libcupti.so.13.xz from the CUDA 13 toolkit. Call 1 ran on 2 x H200
# (nvidia-h200-x2), calls 2-5 on one H200. Run one section with
#   bash bench/results/2026-11-29/s41/calls.sh ID [ARGS...]
# (no ID lists them).
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## call1 {#call1}
#!/bin/bash
# s41 call 1 (2 x H200): A = 5d22a81 (main), B = 2dfbe78 (one copy kernel for the decode-buffer rows). Device tests
# on B (copy kernel, offload, DCA engine incl. Qwen3-MoE, MoE); the offloaded Quest step A/B: 1 request alternating,
# 8 requests, 4 on B; B's 1-request CUPTI timeline (PDL on).
set -u
D=.carry
mkdir -p $D/A $D/B
tar -xJf $D/A.tar.xz -C $D/A; tar -xJf $D/B.tar.xz -C $D/B; xz -dkf $D/libcupti.so.13.xz
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/A/nanovllm make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 \
  --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null &
MK=$!
log "B: device tests"
timeout 170 $D/B/test_cuda --gtest_filter='CudaCopyBatch.*:CudaOffload.*:CudaDualChunkEngine.*:MoeDecode.*:CudaMoe*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^\[  SKIPPED|tests ran" $OUT/tests.log | head -20
wait $MK
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
lanes() {  # lanes BIN N [ARGS...]
  local b=$1 n=$2; shift 2; local t0=$SECONDS
  echo "== $b: $n x 128K fp8 $*" | tee -a $OUT/lanes.log
  timeout 150 $D/$b/nanovllm bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --output-len 48 \
    --no-compare --sparse-policy quest --sparse-budget 2048 --concurrency $n --kv-cache-dtype fp8 "${SP[@]}" "$@" 2>&1 |
    grep -E "^(context|peak)" | grep -v "sparse prefill" | tee -a $OUT/lanes.log
  echo "rc ${PIPESTATUS[0]} ($((SECONDS - t0)) s)" | tee -a $OUT/lanes.log
}
lanes A 1; lanes B 1; lanes A 1; lanes B 1
lanes A 8 --cpu-memory-limit 80; lanes B 8 --cpu-memory-limit 80
lanes B 4
log "B: offloaded timeline 1 x 128K"
NANOVLLM_STEP_TIMELINE_MODEL=/tmp/q4-yarn NANOVLLM_STEP_TIMELINE_SEQS=1 NANOVLLM_STEP_TIMELINE_KV_DTYPE=fp8 \
  NANOVLLM_STEP_TIMELINE_FAST_PREFILL=1 timeout 100 $D/B/test_cuda --gtest_also_run_disabled_tests \
  --gtest_filter='CudaStepTimelineBench.DISABLED_OffloadedQuestDecode' > $OUT/off_timeline_B1.log 2>&1; echo "rc $?"
grep -E "steps; step-to-step" $OUT/off_timeline_B1.log
sed -n '/one step:/,$p' $OUT/off_timeline_B1.log | head -24
log done

# ## call2 {#call2}
#!/bin/bash
# s41 call 2 (one H200; the 2-GPU kind was not lent at that moment): B2 = 2dfbe78 + the DCA engine test with tied
# embeddings. The DCA engine tests; the offloaded Quest step with 8 x 128K (fp8 KV, avgpool 4096 + layer 0 dense
# prefill): CUPTI timeline with PDL off (each kernel's own duration), bench with PDL off; 1 request PDL off / on.
set -u
D=.carry
mkdir -p $D/B2; tar -xJf $D/B2.tar.xz -C $D/B2; xz -dkf $D/libcupti.so.13.xz
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/B2/nanovllm make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 \
  --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null &
MK=$!
log "B2: DCA engine tests"
timeout 60 $D/B2/test_cuda --gtest_filter='CudaDualChunkEngine.*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|prompt" $OUT/tests.log | head -20
wait $MK
log "B2: offloaded timeline 8 x 128K, PDL off"
NANOVLLM_PDL=0 NANOVLLM_STEP_TIMELINE_MODEL=/tmp/q4-yarn NANOVLLM_STEP_TIMELINE_SEQS=8 NANOVLLM_STEP_TIMELINE_KV_DTYPE=fp8 \
  NANOVLLM_STEP_TIMELINE_FAST_PREFILL=1 timeout 200 $D/B2/test_cuda --gtest_also_run_disabled_tests \
  --gtest_filter='CudaStepTimelineBench.DISABLED_OffloadedQuestDecode' > $OUT/off_timeline_8_pdl0.log 2>&1; echo "rc $?"
grep -E "steps; step-to-step" $OUT/off_timeline_8_pdl0.log
sed -n '/one step:/,$p' $OUT/off_timeline_8_pdl0.log | head -24
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
lanes() {  # lanes N [ARGS...]
  local n=$1; shift; local t0=$SECONDS
  echo "== B2: $n x 128K fp8 $*" | tee -a $OUT/lanes.log
  timeout 150 $D/B2/nanovllm bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --output-len 48 \
    --no-compare --sparse-policy quest --sparse-budget 2048 --concurrency $n --kv-cache-dtype fp8 "${SP[@]}" "$@" 2>&1 |
    grep -E "^context" | grep -v "sparse prefill" | tee -a $OUT/lanes.log
  echo "rc ${PIPESTATUS[0]} ($((SECONDS - t0)) s)" | tee -a $OUT/lanes.log
}
export NANOVLLM_PDL=0; echo "(PDL off)" | tee -a $OUT/lanes.log; lanes 1
unset NANOVLLM_PDL; echo "(PDL on)" | tee -a $OUT/lanes.log; lanes 1
export NANOVLLM_PDL=0; echo "(PDL off)" | tee -a $OUT/lanes.log; lanes 8 --cpu-memory-limit 80
log done

# ## call3 {#call3}
#!/bin/bash
# s41 call 3 (one H200): C = 4b21fea (B2 + Quest scores on tensor cores + fp8 MoE experts on CUDA), B2 = 1f4d445.
# Device tests on C (sparse, offload sparse, copy kernel, MoE bf16/fp8 kernels and engines, fp8 engine); the
# offloaded Quest step B2 / C (1 and 8 x 128K, fp8 KV, avgpool 4096 + layer 0 dense prefill); MoE decode per layer,
# bf16 vs fp8 experts.
set -u
D=.carry
mkdir -p $D/B2 $D/C; tar -xJf $D/B2.tar.xz -C $D/B2; tar -xJf $D/C.tar.xz -C $D/C
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/C/nanovllm make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 \
  --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null &
MK=$!
log "C: device tests"
timeout 200 $D/C/test_cuda --gtest_filter='CudaSparse.*:CudaCopyBatch.*:CudaOffload.Sparse*:CudaMoe*:MoeDecode.*:CudaFp8MoeEngine.*:CudaFp8Engine.*:CudaKvFp8*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^\[  SKIPPED|tests ran" $OUT/tests.log | head -30
wait $MK
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
lanes() {  # lanes BIN N [ARGS...]
  local b=$1 n=$2; shift 2; local t0=$SECONDS
  echo "== $b: $n x 128K fp8 $*" | tee -a $OUT/lanes.log
  timeout 150 $D/$b/nanovllm bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --output-len 48 \
    --no-compare --sparse-policy quest --sparse-budget 2048 --concurrency $n --kv-cache-dtype fp8 "${SP[@]}" "$@" 2>&1 |
    grep -E "^context" | grep -v "sparse prefill" | tee -a $OUT/lanes.log
  echo "rc ${PIPESTATUS[0]} ($((SECONDS - t0)) s)" | tee -a $OUT/lanes.log
}
lanes B2 1; lanes C 1
lanes C 8 --cpu-memory-limit 80; lanes B2 8 --cpu-memory-limit 80
log "C: MoE decode per layer, bf16 vs fp8 experts"
timeout 120 $D/C/test_cuda --gtest_also_run_disabled_tests --gtest_filter='MoeDecodeBench.DISABLED_FusedVsUnfused' 2>&1 | grep -E "^moe decode|FAILED" | tee $OUT/moe_bench.log
log done

# ## call4 {#call4}
#!/bin/bash
# s41 call 4 (one H200): D = 66eb150 (fd9107d's code: the copy kernel and the tensor-core Quest scores). Sparse,
# offload and copy device tests on D; the fp8 MoE branch's gate/up decode test with CUDA_LAUNCH_BLOCKING (Cmoe =
# 4b21fea's test_cuda) to name the failing launch; 8 x 128K on D with PDL on and off, same call.
set -u
D=.carry
mkdir -p $D/D $D/Cmoe; tar -xJf $D/D.tar.xz -C $D/D; tar -xJf $D/Cmoe.tar.xz -C $D/Cmoe
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log card; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
$D/D/nanovllm make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 \
  --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null &
MK=$!
log "D: device tests"
timeout 170 $D/D/test_cuda --gtest_filter='CudaSparse.*:CudaSparseDecode.*:CudaDualChunkSparse.*:CudaCopyBatch.*:CudaOffload.*:CudaKvFp8*:CudaPageCache*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|^\[  SKIPPED|Failure" $OUT/tests.log | head -20
log "Cmoe: MoeDecode.GateUp with CUDA_LAUNCH_BLOCKING=1"
CUDA_LAUNCH_BLOCKING=1 timeout 60 $D/Cmoe/test_cuda --gtest_filter='MoeDecode.GateUp*' > $OUT/moe_gateup.log 2>&1; echo "rc $?"
grep -vE "^\[ RUN|^Running main|^Note: Google" $OUT/moe_gateup.log | head -20
which compute-sanitizer 2>/dev/null; ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null
wait $MK
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
lanes() {  # lanes N [ARGS...]
  local n=$1; shift; local t0=$SECONDS
  echo "== D: $n x 128K fp8 $*" | tee -a $OUT/lanes.log
  timeout 150 $D/D/nanovllm bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --output-len 48 \
    --no-compare --sparse-policy quest --sparse-budget 2048 --concurrency $n --kv-cache-dtype fp8 "${SP[@]}" "$@" 2>&1 |
    grep -E "^context" | grep -v "sparse prefill" | tee -a $OUT/lanes.log
  echo "rc ${PIPESTATUS[0]} ($((SECONDS - t0)) s)" | tee -a $OUT/lanes.log
}
echo "(PDL on)" | tee -a $OUT/lanes.log; lanes 8 --cpu-memory-limit 80
export NANOVLLM_PDL=0; echo "(PDL off)" | tee -a $OUT/lanes.log; lanes 8 --cpu-memory-limit 80
log done

# ## call5 {#call5}
#!/bin/bash
# s41 call 5 (one H200, the machine of call 4): compute-sanitizer memcheck on the fp8 MoE branch's gate/up decode
# test (Cmoe = 4b21fea's test_cuda).
D=.carry; mkdir -p $D/Cmoe; tar -xJf $D/Cmoe.tar.xz -C $D/Cmoe; export NANOVLLM_TEST_DATA=$PWD/tests/data
timeout 100 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --print-limit 6 $D/Cmoe/test_cuda --gtest_filter='MoeDecode.GateUp*' > $OUT/sanitizer.log 2>&1; echo rc $?
grep -vE "^\[ RUN|^Running main|^Note: Google" $OUT/sanitizer.log | head -60
