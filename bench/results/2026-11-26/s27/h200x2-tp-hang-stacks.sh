#!/bin/bash
# Issue 34 diagnosis: where do the rank threads wait when a TP2 run hangs? Attach cuda-gdb to the hung process
# and print every host thread's stack.
set -u
D=.dev-tp2
for f in nanovllm; do xz -dkf -T0 "$D/$f.xz" && chmod +x "$D/$f"; done
B=$PWD/$D/nanovllm
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name --format=csv,noheader; which cuda-gdb
$B make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 > /dev/null
for attempt in 1 2 3; do
log "8B latency TP2 attempt $attempt"
$B bench latency --backend cuda --model /tmp/q8 --tensor-parallel-size 2 --context 1024 \
  --decode-tokens 64 --skip-prefill > "$OUT/lat-tp2-$attempt.log" 2>&1 &
P=$!
for s in $(seq 1 35); do sleep 1; kill -0 $P 2>/dev/null || break; done
if kill -0 $P 2>/dev/null; then
  log "still running after ${s} s: stacks"
  timeout 90 cuda-gdb -p $P -batch -ex "set pagination off" -ex "info threads" -ex "thread apply all bt 30" > "$OUT/stacks.txt" 2>&1
  echo "cuda-gdb rc $?"
  grep -E "^Thread|^#[0-9]+ " "$OUT/stacks.txt" | grep -vE " in (__GI_|syscall|__futex|futex)" | cut -c1-220 | head -150
  kill -9 $P
  break
else
  wait $P; log "finished rc $?"; grep "decode bs" "$OUT/lat-tp2-$attempt.log"
fi
done
log done
