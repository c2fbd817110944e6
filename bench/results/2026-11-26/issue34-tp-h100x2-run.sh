#!/bin/bash
# Issue 34 device check: TP2 vs TP1 on the 2-GPU machine. Run from the repository root.
set -u
D=$(cd "$(dirname "$0")" && pwd)
cd "$D" && xz -dk -T4 nanovllm.xz test_cuda.xz && chmod +x nanovllm test_cuda && cd - >/dev/null
B=$D/nanovllm
if ldd "$B" | grep -q "libnccl.*not found"; then  # the toolkit's NCCL missing: PyTorch's wheel has one
  export LD_LIBRARY_PATH=$(dirname "$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so.2"))')"):${LD_LIBRARY_PATH:-}
fi
ldd "$B" | grep nccl
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nvidia-smi topo -m | head -4
log tests
timeout 120 "$D/test_cuda" --gtest_filter='CudaElementwise.EmbeddingVocab*:CudaElementwise.GatherVocab*:CudaElementwise.EmbeddingCopies*:CudaTensorParallel.*:CudaVsCpu.Tied*' 2>&1 | tail -25
log make models
"$B" make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 >/dev/null 2>&1 &
"$B" make-test-model --out /tmp/q8 --preset qwen3-8b --seed 1 >/dev/null 2>&1
wait
python3 - <<'PY'
import json, random
r = random.Random(7)
json.dump([[r.randrange(151936) for _ in range(r.randrange(32, 200))] for _ in range(16)], open('/tmp/prompts.json', 'w'))
PY
for m in q06 q8; do
  for tp in 1 2; do
    log "agree $m tp$tp"
    timeout 90 "$B" generate --backend cuda --model /tmp/$m --tensor-parallel-size $tp --prompt-ids-file /tmp/prompts.json \
      --max-tokens 64 --temperature 0 --ignore-eos --json > "$OUT/agree-$m-tp$tp.jsonl" 2> "$OUT/agree-$m-tp$tp.err"
    echo "rc $?"; tail -2 "$OUT/agree-$m-tp$tp.err"
  done
  python3 - "$OUT/agree-$m-tp1.jsonl" "$OUT/agree-$m-tp2.jsonl" <<'PY'
import json, sys
a = [json.loads(l)["token_ids"] for l in open(sys.argv[1]) if l.startswith("{")]
b = [json.loads(l)["token_ids"] for l in open(sys.argv[2]) if l.startswith("{")]
same = sum(x == y for p, q in zip(a, b) for x, y in zip(p, q)); tot = sum(len(p) for p in a)
lead = [next((i for i, (x, y) in enumerate(zip(p, q)) if x != y), len(p)) for p, q in zip(a, b)]
print(f"agreement {sys.argv[1].split('agree-')[1]}: {same}/{tot} positions equal; identical prefix per prompt {lead}")
PY
done
for tp in 1 2; do
  log "latency q8 tp$tp"
  timeout 100 env NANOVLLM_LOG_LEVEL=info "$B" bench latency --backend cuda --model /tmp/q8 --tensor-parallel-size $tp \
    --context 1024 --decode-tokens 64 --skip-prefill --json-out "$OUT/lat-q8-tp$tp.json" > "$OUT/lat-q8-tp$tp.log" 2>&1
  echo "rc $?"; grep -iE "decode|ms/token|error|captured" "$OUT/lat-q8-tp$tp.log" | tail -6
done
for tp in 1 2; do
  log "throughput q8 tp$tp"
  timeout 150 "$B" bench throughput --backend cuda --model /tmp/q8 --tensor-parallel-size $tp \
    --json-out "$OUT/thr-q8-tp$tp.json" > "$OUT/thr-q8-tp$tp.log" 2>&1
  echo "rc $?"; grep -E "throughput:|time split|error" "$OUT/thr-q8-tp$tp.log" | tail -3
done
log done
