#!/usr/bin/env bash
set -uo pipefail
cd .carry && tar xJf bin.tar.xz && cd ..
BIN=.carry/nanovllm; Q=/tmp/q25
[ -d $Q ] || $BIN make-test-model --out $Q --preset qwen2.5-7b-1m --seed 1 > /dev/null
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
timeout 400 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:"prefill_wgmma|select_kernel|last_query|pool_|clear" --launch-count 1200 \
  $BIN bench offload --backend cuda --model $Q --context 262144 --output-len 2 --no-compare "${SP[@]}" > $OUT/ncu.csv 2> $OUT/ncu.err; echo "ncu rc=$?"
