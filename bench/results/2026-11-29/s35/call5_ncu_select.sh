#!/usr/bin/env bash
# s35 call 4: ncu detail of one late avgpool select_kernel at 256K (and the 1M-like per-chunk times of select).
set -uo pipefail
cd .carry && tar xJf bin.tar.xz && cd ..
BIN=.carry/nanovllm; Q=/tmp/q25
[ -d $Q ] || $BIN make-test-model --out $Q --preset qwen2.5-7b-1m --seed 1 > /dev/null
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
timeout 300 ncu --clock-control none --set full -k regex:select_kernel --launch-skip 60 --launch-count 1 \
  $BIN bench offload --backend cuda --model $Q --context 262144 --output-len 2 --no-compare "${SP[@]}" > $OUT/ncu_full.txt 2> $OUT/ncu.err; echo "ncu rc=$?"
grep -E "Duration|Warp Cycles Per Issued|Achieved Occupancy|Stall|Registers|Shared Memory Configuration|Dynamic Shared|Block Limit|Theoretical Occ|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit" $OUT/ncu_full.txt | head -40
