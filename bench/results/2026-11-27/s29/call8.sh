#!/bin/bash
# Session 29 call 8 (one H200): the full ncu section set of one select_pages launch of the 128K offloaded
# Quest decode (8 CTAs of 1024 threads), to see what it waits on.
set -u
D=.dev-s29
xz -dkf -T0 $D/nanovllm.xz; chmod +x $D/nanovllm
B=$PWD/$D/nanovllm
$B make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null
OFF="bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --no-compare --sparse-policy quest --sparse-budget 2048 --sparse-page-size 16 --enforce-eager --output-len 4"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 300 $NCU --cache-control none --set full --import-source yes --kernel-name regex:"select_pages" --launch-skip 150 --launch-count 1 \
  $B $OFF > $OUT/ncu_select_full.txt 2>&1
echo "ncu rc $?"
grep -E "Duration|Elapsed Cycles|Achieved Occupancy|Warp Cycles Per Issued|Stall|Barrier|One or More Eligible|Issued Warp" $OUT/ncu_select_full.txt | head -30
