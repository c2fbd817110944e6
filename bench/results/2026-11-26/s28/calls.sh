#!/usr/bin/env bash
# Session 28 (2026-11-26): the scripts of its device calls, verbatim, one section per former file under
# "# ## <its path> {#id}" (the separate files: git show f72d536:<its path>). Not one script: run one section
# from the repository root with
#   bash bench/results/2026-11-26/s28/calls.sh ID [ARGS...]
# (no ID lists them). The section runs as its own bash script with $0 = this file, so `dirname "$0"` is the
# folder it was written in.
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## bench/results/2026-11-26/s28/tp2-variants-32b.sh {#tp2-variants-32b}
#!/bin/bash
# Issue 34, 2-GPU machine: peer all-reduce tests; 8B bs=1 TP2 latency of three builds, alternating —
# A: plain peer all-reduce, no PDL; C1: all-reduce fused with the residual add + RMSNorm, PDL (trigger
# after the wait); C2: fused, no PDL — then a Qwen3-32B-shaped model at TP2 (latency with A and the best
# fused build, and the step timeline of test_cuda = C2). D holds nanovllm-{A,C1,C2}.xz, test_cuda.xz,
# libcupti.so.13.xz.
set -u
D=${1:-.dev-tp2D}
for f in nanovllm-A nanovllm-C1 nanovllm-C2 test_cuda libcupti.so.13; do xz -dkf -T0 "$D/$f.xz"; done
chmod +x $D/nanovllm-* $D/test_cuda
export NANOVLLM_TEST_DATA=$PWD/tests/data NANOVLLM_CUPTI_LIB=$PWD/$D/libcupti.so.13
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$D/nanovllm-A make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 > /dev/null &
MK=$!
log "CUDA tests: peer all-reduce"
timeout 100 $D/test_cuda --gtest_filter='CudaPeerAllReduce.*:CudaTensorParallel.*' > $OUT/test_cuda_peer.log 2>&1
echo "rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Failure|differ|mismatch" $OUT/test_cuda_peer.log | head -12
wait $MK
lat() { timeout 90 $1 bench latency --backend cuda --model $2 --tensor-parallel-size 2 --context 1024 --decode-tokens 64 \
    --skip-prefill 2>&1 | grep -E "decode bs|rror"; }
for round in 1 2; do
  for b in A C1 C2; do log "8B latency tp2 $b"; lat $D/nanovllm-$b /tmp/q8 | tee -a $OUT/8b-$b.txt; done
done
best=$(for b in C1 C2; do echo "$(grep -o '[0-9.]* ms/step median' $OUT/8b-$b.txt | awk '{s+=$1} END {print s}') $b"; done | sort -n | head -1 | cut -d' ' -f2)
log "best fused build: $best"
rm -rf /tmp/q8
log "make the 32B-shaped model"
$D/nanovllm-A make-test-model --out /tmp/q32 --preset qwen3-8b --seed 1 --config-override \
  '{"num_hidden_layers": 64, "hidden_size": 5120, "num_attention_heads": 64, "num_key_value_heads": 8, "intermediate_size": 25600, "head_dim": 128}' > /dev/null
du -sh /tmp/q32
for b in A $best; do log "32B latency tp2 $b"; lat $D/nanovllm-$b /tmp/q32; done
log "32B step timeline tp2 (C2)"
NANOVLLM_STEP_TIMELINE_MODEL=/tmp/q32 NANOVLLM_STEP_TIMELINE_TP=2 timeout 150 $D/test_cuda --gtest_also_run_disabled_tests \
  --gtest_filter='CudaStepTimelineBench.*' > $OUT/timeline_32b_tp2.log 2>&1; echo "rc $?"
sed -n '/one step:/,$p' $OUT/timeline_32b_tp2.log | head -14
log done

# ## bench/results/2026-11-26/s28/tp2-final.sh {#tp2-final}
#!/bin/bash
# Issue 34, 2-GPU machine, the shipped tree (fused peer all-reduce): peer/TP tests, 8B bs=1 latency TP1 and
# TP2 alternating, offline throughput TP2 and TP1, in one call. D holds nanovllm.xz, test_cuda.xz.
set -u
D=${1:-.dev-final}
for f in nanovllm test_cuda; do xz -dkf -T0 "$D/$f.xz"; chmod +x $D/$f; done
B=$PWD/$D/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 > /dev/null &
MK=$!
timeout 60 $D/test_cuda --gtest_filter='CudaPeerAllReduce.*:CudaTensorParallel.*' > $OUT/test_cuda_final.log 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" $OUT/test_cuda_final.log
wait $MK
for tp in 1 2 1 2; do
  log "8B latency tp$tp"
  timeout 40 $B bench latency --backend cuda --model /tmp/q8 --tensor-parallel-size $tp --context 1024 --decode-tokens 64 \
    --skip-prefill 2>&1 | grep -E "decode bs|rror"
done
for tp in 2 1; do
  log "8B throughput tp$tp"
  timeout 60 $B bench throughput --backend cuda --model /tmp/q8 --tensor-parallel-size $tp 2>&1 | tail -3
done
log done
