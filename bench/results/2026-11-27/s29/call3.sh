#!/bin/bash
# Session 29 call 3 (one H200): issue 30's 128K offloaded Quest decode (Qwen3-4B YaRN shape) after the
# 1024-thread select_pages: step time, and ncu of the selection kernels (scores, select, plan) per layer.
set -u
D=.dev-s29
xz -dkf -T0 $D/nanovllm.xz; chmod +x $D/nanovllm
B=$PWD/$D/nanovllm
log() { echo "=== $(date +%T) $*"; }
log cards; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$B make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null
OFF="bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --no-compare --sparse-policy quest --sparse-budget 2048"
log "quest 2048, pages 16"; timeout 150 $B $OFF --output-len 48 --sparse-page-size 16 2>&1 | tail -6
log "quest 2048, pages 32"; timeout 150 $B $OFF --output-len 48 --sparse-page-size 32 2>&1 | tail -6
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
log "ncu selection kernels, pages 16 (decode steps 3-4)"
timeout 300 $NCU --cache-control none --kernel-name regex:"quest_scores|select_pages|plan_kernel|fetch_kernel" \
  --launch-skip 288 --launch-count 288 --metrics gpu__time_duration.sum --csv --page raw \
  $B $OFF --output-len 8 --sparse-page-size 16 > $OUT/ncu_sel16.csv 2> $OUT/ncu_sel16.err
echo "ncu rc $?"; tail -3 $OUT/ncu_sel16.err
python3 - $OUT/ncu_sel16.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
h = rows[head]; k = h.index("Kernel Name"); t = h.index("gpu__time_duration.sum")
unit = rows[head + 1][t]
scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, 1e-3)
tot = collections.defaultdict(list)
for r in rows[head + 2:]:
    if len(r) > t:
        try: tot[r[k].split("(")[0].split("<")[0]].append(float(r[t]))
        except ValueError: pass
for name, v in tot.items(): print(f"{name}: {len(v)} launches, mean {sum(v)/len(v)*scale:.2f} us ({unit})")
PY
log done
