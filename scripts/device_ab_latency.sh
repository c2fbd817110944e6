#!/usr/bin/env bash
# Same-machine A/B of bs=1 decode latency at 1K context: alternates .carry/nanovllm_base and
# .carry/nanovllm_new on the Qwen3-0.6B and Qwen3-8B shapes, N times each.
# Usage (device): bash scripts/device_ab_latency.sh [N]
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
N=${1:-2}
for m in q06:qwen3-0.6b q8:qwen3-8b; do
  [ -d /tmp/${m%%:*} ] || .carry/nanovllm_new make-test-model --out /tmp/${m%%:*} --preset ${m##*:} --seed 1 >/dev/null 2>&1
done
for m in q06 q8; do
  for i in $(seq "$N"); do
    for v in base new; do
      .carry/nanovllm_$v bench latency --backend cuda --model /tmp/$m --context 1024 --decode-tokens 64 \
        --prefill 1024 --json-out "$OUT/lat_${m}_${v}_$i.json" > "$OUT/lat_${m}_${v}_$i.log" 2>&1
      printf '%-4s %-4s %s\n' "$m" "$v" "$(grep -iE 'decode' "$OUT/lat_${m}_${v}_$i.log" | head -2 | tr '\n' ' ')"
    done
  done
done
