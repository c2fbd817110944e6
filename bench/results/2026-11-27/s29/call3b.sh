#!/bin/bash
# Session 29 call 3b (one H200): ncu of issue 30's offloaded Quest decode kernels per layer (128K, Qwen3-4B
# YaRN shape, budget 2048, pages of 16), --enforce-eager so that no graph warm-up runs the paged path's copies.
set -u
D=.dev-s29
xz -dkf -T0 $D/nanovllm.xz; chmod +x $D/nanovllm
B=$PWD/$D/nanovllm
[ -f /tmp/q4-yarn/config.json ] || $B make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null
OFF="bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --no-compare --sparse-policy quest --sparse-budget 2048 --enforce-eager"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
echo "=== $(date +%T) ncu, the sparse kernels of 3 decode steps"
timeout 400 $NCU --cache-control none --kernel-name regex:"quest_scores|select_pages|plan_kernel|fetch_kernel|decode_tc|gather_key" \
  --metrics gpu__time_duration.sum --csv --page raw $B $OFF --output-len 4 --sparse-page-size 16 > $OUT/ncu_all.csv 2> $OUT/ncu_all.err
echo "ncu rc $?"; tail -2 $OUT/ncu_all.err
echo "=== $(date +%T) done"
