#!/bin/bash
# Session 29 call 2 (2 GPUs): multi-node tensor parallel as two processes on one host (one GPU each via
# CUDA_VISIBLE_DEVICES, NCCL over the rendezvous at 127.0.0.1), against one process; the new CUDA tests.
set -u
D=.dev-s29
for f in nanovllm test_cuda; do xz -dkf -T0 "$D/$f.xz"; chmod +x $D/$f; done
B=$PWD/$D/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B make-test-model --out /tmp/q8t --preset qwen3-8b --seed 1 --config-override '{"tie_word_embeddings": true}' > /dev/null &
MK=$!
log tests
timeout 300 $D/test_cuda --gtest_filter='CudaTensorParallel.*:CudaOffload.*:CudaPeerAllReduce.*:CudaVsCpu.*' > $OUT/test_cuda.log 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran" $OUT/test_cuda.log
wait $MK
python3 - <<'PY' > /tmp/prompts.json
import json, random
random.seed(5)
print(json.dumps([[random.randrange(151000) for _ in range(n)] for n in (1, 17, 100, 300, 513, 1000, 64, 7)]))
PY
ENG="--backend cuda --model /tmp/q8t --max-num-seqs 8 --max-model-len 2048"
GEN="--prompt-ids-file /tmp/prompts.json --temperature 0 --max-tokens 64 --ignore-eos --json"
log "generate tp1"; timeout 120 $B generate $ENG $GEN > $OUT/tp1.json 2> $OUT/tp1.err; echo rc $?
log "generate tp2 one process"; timeout 120 $B generate $ENG --tensor-parallel-size 2 $GEN > $OUT/tp2.json 2> $OUT/tp2.err; echo rc $?
MN="--tensor-parallel-size 2 --nnodes 2 --dist-init-addr 127.0.0.1:29533"
log "generate tp2 two processes"
CUDA_VISIBLE_DEVICES=1 timeout 150 $B worker $ENG $MN --node-rank 1 > $OUT/worker_gen.log 2>&1 & W=$!
CUDA_VISIBLE_DEVICES=0 timeout 120 $B generate $ENG $MN --node-rank 0 $GEN > $OUT/tp2_2proc.json 2> $OUT/tp2_2proc.err; echo rc $?
wait $W; echo "worker rc $?"; tail -3 $OUT/worker_gen.log; tail -3 $OUT/tp2_2proc.err
python3 - $OUT <<'PY'
import json, sys
out = sys.argv[1]
def load(name): return [json.loads(l)["token_ids"] for l in open(f"{out}/{name}") if l.startswith("{")]
a, b, c = load("tp1.json"), load("tp2.json"), load("tp2_2proc.json")
for name, x in (("tp2 one process", b), ("tp2 two processes", c)):
    same = sum(p == q for r, s in zip(a, x) for p, q in zip(r, s)); total = sum(len(r) for r in a)
    print(f"{name} vs tp1: {same}/{total} tokens equal; prompts identical: {sum(r == s for r, s in zip(a, x))}/{len(a)}")
print("two processes vs one process tp2:", sum(r == s for r, s in zip(b, c)), "of", len(b), "prompts identical")
PY
LAT="--context 1024 --decode-tokens 64 --skip-prefill"
for i in 1 2; do
  log "latency tp1"; timeout 60 $B bench latency $ENG $LAT 2>&1 | grep -E "decode bs|rror"
  log "latency tp2 one process"; timeout 60 $B bench latency $ENG $LAT --tensor-parallel-size 2 2>&1 | grep -E "decode bs|rror"
  log "latency tp2 two processes"
  CUDA_VISIBLE_DEVICES=1 timeout 100 $B worker $ENG $MN --node-rank 1 > $OUT/worker_lat$i.log 2>&1 & W=$!
  CUDA_VISIBLE_DEVICES=0 timeout 90 $B bench latency $ENG $LAT $MN --node-rank 0 2>&1 | grep -E "decode bs|rror"
  wait $W; echo "worker rc $?"
done
log done
