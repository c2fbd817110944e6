#!/usr/bin/env bash
# Same-machine A/B of bs=1 decode latency at 1K context for an on/off environment switch of one binary
# (.carry/nanovllm): VAR=0 and VAR=1 alternate on the Qwen3-0.6B (N times) and Qwen3-8B (M times) shapes.
# Usage (device): bash scripts/device_ab_env.sh VAR [N] [M]    (logs and JSON to $OUT)
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
VAR=$1 N=${2:-2} M=${3:-1}
B=.carry/nanovllm
for m in q06:qwen3-0.6b q8:qwen3-8b; do
  [ -d /tmp/${m%%:*} ] || $B make-test-model --out /tmp/${m%%:*} --preset ${m##*:} --seed 1 >/dev/null 2>&1
done
run() {  # model, repeat
  for v in 0 1; do
    env "$VAR=$v" $B bench latency --backend cuda --model /tmp/$1 --context 1024 --decode-tokens 64 --prefill 1024 \
      --json-out "$OUT/lat_$1_${VAR}${v}_$2.json" > "$OUT/lat_$1_${VAR}${v}_$2.log" 2>&1
    printf '%-4s %s=%s %s\n' "$1" "$VAR" "$v" "$(grep -E 'decode bs' "$OUT/lat_$1_${VAR}${v}_$2.log")"
  done
}
for i in $(seq "$N"); do run q06 "$i"; done
for i in $(seq "$M"); do run q8 "$i"; done
