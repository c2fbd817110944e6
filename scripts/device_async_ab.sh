#!/usr/bin/env bash
# Async scheduling A/B on the device machine: CUDA tests, then bs=1 latency (0.6B, 8B) and the
# throughput workload (0.6B) with async scheduling on (the default) and off (--no-async-scheduling),
# alternating in one process tree. Binaries in .carry/ (see the results files for how they were built).
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} NANOVLLM_TEST_DATA=$PWD/tests/data
B=.carry/nanovllm
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.memory --format=csv > $S; date -u >> $S
echo "== test_cuda" >> $S
.carry/test_cuda > $OUT/test_cuda.log 2>&1; echo "rc=$?" >> $S
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" $OUT/test_cuda.log >> $S
$B make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 >/dev/null 2>&1
$B make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 >/dev/null 2>&1
flag() { [ "$1" = off ] && echo --no-async-scheduling; }
echo "== latency A/B" >> $S
for m in q06 q8; do for r in 1 2; do for mode in on off; do
  $B bench latency --backend cuda --model /tmp/$m --context 1024 --decode-tokens 64 --prefill 1024 $(flag $mode) 2>&1 |
    grep "decode bs" | sed "s/^/$m async=$mode run $r: /" >> $S
done; done; done
echo "== throughput A/B" >> $S
for r in 1 2 3; do for mode in on off; do
  $B bench throughput --backend cuda --model /tmp/q06 $(flag $mode) 2>&1 | grep -E "time split|achieved" |
    sed "s/^/async=$mode run $r: /" >> $S
done; done
cat $S
