#!/usr/bin/env bash
# Session 30 (2026-11-27): the scripts of its device calls, verbatim, one section per former file under
# "# ## <its path> {#id}" (the separate files: git show f72d536:<its path>). Not one script: run one section
# from the repository root with
#   bash bench/results/2026-11-27/s30/calls.sh ID [ARGS...]
# (no ID lists them). The section runs as its own bash script with $0 = this file, so `dirname "$0"` is the
# folder it was written in.
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## bench/results/2026-11-27/s30/call1.sh {#call1}
#!/bin/bash
# Session 30 call 1 (one GPU): issue 30's batched offloaded decode. CUDA offload tests (the new concurrent
# test included), then the 128K Qwen3-4B YaRN shape with Quest budget 2048 (pages of 16): one request, and
# 4 concurrent requests (offload max_num_seqs 4), default hot-page cache and a 32K-token one.
set -u
D=.dev-s30
for f in nanovllm test_cuda; do xz -dkf -T0 "$D/$f.xz"; chmod +x $D/$f; done
B=$PWD/$D/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; free -g | head -2
$B make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null &
MK=$!
log tests
timeout 200 $D/test_cuda --gtest_filter='CudaOffload.*Sparse*:CudaOffload.Concurrent*' > $OUT/test_cuda.log 2>&1
echo "tests rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tokens equal" $OUT/test_cuda.log
wait $MK
OFF="bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --no-compare --sparse-policy quest --sparse-budget 2048 --sparse-page-size 16 --output-len 48"
log "1 request"; timeout 120 $B $OFF --json-out $OUT/c1.json 2>&1 | grep -E "context|peak|rror"
log "4 requests"; timeout 200 $B $OFF --concurrency 4 --json-out $OUT/c4.json 2>&1 | grep -E "context|peak|rror"
log "4 requests, 32K cache"; timeout 200 $B $OFF --concurrency 4 --num-kv-buffers 2 --sparse-gpu-cache-tokens 32768 --json-out $OUT/c4_cache32k.json 2>&1 | grep -E "context|peak|rror"
log done

# ## bench/results/2026-11-27/s30/call3.sh {#call3}
#!/bin/bash
# Session 30 call 3 (one GPU; `call3.sh a` then `call3.sh b`): the whole test_cuda on the final tree (batched offload + CUDA vertical-slash
# and FlexPrefill estimators); the estimators' 128K timing; 128K offloaded Quest decode (4B YaRN), one and 4
# requests; the step with pages of 32 and ncu of its selection kernels (the selection's share of the step).
set -u
D=.dev-s30
for f in nanovllm test_cuda; do xz -dkf -T0 "$D/$f.xz"; chmod +x $D/$f; done
B=$PWD/$D/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null &
MK=$!
if [ "${1:-a}" = a ]; then
log test_cuda
timeout 420 $D/test_cuda > $OUT/test_cuda.log 2>&1
echo "test_cuda rc $?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|tests ran|tokens equal" $OUT/test_cuda.log
log "estimator bench"
timeout 200 $D/test_cuda --gtest_also_run_disabled_tests --gtest_filter='CudaEstimatorBench.*' > $OUT/estimator_bench.log 2>&1
echo "rc $?"; grep -vE "^\[|^$|Running main|Note:" $OUT/estimator_bench.log | tail -30
fi
wait $MK
if [ "${1:-a}" = a ]; then
# Issue 31 quality on the retrieval fixture, every policy on CUDA (vertical-slash and FlexPrefill new here).
EV="eval ruler --backend cuda --model tests/data/retrieval-model --context 16384,32768 --samples 16 --skip-too-short --max-num-seqs 1 --first-token-logprobs 20"
log "fixture dense"; timeout 60 $B $EV --json-out $OUT/fx-dense.json 2>&1 | grep -E "^mean|^overall|rror"
for P in "--sparse-prefill-policy minference" "--sparse-prefill-policy minference --sparse-prefill-dense-layers 1" \
         "--sparse-prefill-policy flexprefill" "--sparse-prefill-policy flexprefill --sparse-prefill-dense-layers 1" \
         "--sparse-prefill-policy xattention" "--sparse-prefill-policy avgpool" \
         "--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1"; do
  log "fixture $P"
  timeout 90 $B $EV $P --kl-reference $OUT/fx-dense.json --json-out "$OUT/fx$(echo $P | tr -d ' -').json" 2>&1 | grep -E "^mean|^overall|sparse prefill|rror"
done
elif [ "$1" = b ] || [ "$1" = c ]; then  # c: ncu only
OFF0="bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --no-compare --sparse-policy quest --sparse-budget 2048"
OFF="$OFF0 --output-len 48"
[ "$1" = c ] || { log "1 request, pages 16"; timeout 120 $B $OFF --sparse-page-size 16 --json-out $OUT/c1.json 2>&1 | grep -E "context|rror"; }
[ "$1" = c ] || { log "4 requests, pages 16"; timeout 200 $B $OFF --sparse-page-size 16 --concurrency 4 --json-out $OUT/c4.json 2>&1 | grep -E "context|rror"; }
[ "$1" = c ] || { log "1 request, pages 32"; timeout 120 $B $OFF --sparse-page-size 32 --json-out $OUT/c1_p32.json 2>&1 | grep -E "context|rror"; }
[ "$1" = c ] || { log "4 requests, pages 32"; timeout 200 $B $OFF --sparse-page-size 32 --concurrency 4 --json-out $OUT/c4_p32.json 2>&1 | grep -E "context|rror"; }
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for ps in 16 32; do
  log "ncu selection kernels, pages $ps"
  timeout 150 $NCU --cache-control none --kernel-name regex:"quest_scores|select_pages|plan_kernel" \
    --metrics gpu__time_duration.sum --csv --page raw $B $OFF0 --sparse-page-size $ps --enforce-eager --output-len 4 \
    > $OUT/ncu_p$ps.csv 2> $OUT/ncu_p$ps.err
  echo "rc $?"
  python3 - $OUT/ncu_p$ps.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
h = rows[head]; k = h.index("Kernel Name"); t = h.index("gpu__time_duration.sum")
unit = rows[head + 1][t]
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, 1e-3)
tot = collections.defaultdict(list)
for r in rows[head + 2:]:
    if len(r) > t:
        try: tot[r[k].split("(")[0].split("<")[0]].append(float(r[t].replace(",", "")))
        except ValueError: pass
# the last 3 decode steps x 36 layers of each kernel (the warm-up request and prefill have none of these)
s = 0
for name, v in tot.items():
    v = v[-108:]; m = sum(v) / len(v) * scale; s += m
    print(f"{name}: {len(v)} launches, mean {m:.2f} us")
print(f"selection per layer: {s:.2f} us")
PY
done
fi
log done
