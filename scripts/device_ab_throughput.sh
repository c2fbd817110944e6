#!/usr/bin/env bash
# Same-machine A/B of the throughput bench: alternates .carry/nanovllm_base and .carry/nanovllm_new
# (Qwen3-0.6B shape) N times each, so machine-to-machine spread (~1%) does not enter the comparison.
# Usage (device): bash scripts/device_ab_throughput.sh [N]
# BASE_ARGS / NEW_ARGS (optional): extra bench options for one side, e.g. the same binary twice with
# NEW_ARGS="--max-num-batched-tokens 16384" and .carry/nanovllm_base a copy of nanovllm_new.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
N=${1:-3}
[ -d /tmp/q06 ] || .carry/nanovllm_new make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 >/dev/null 2>&1
declare -A extra=([base]="${BASE_ARGS:-}" [new]="${NEW_ARGS:-}")
for i in $(seq "$N"); do
  for v in base new; do
    # shellcheck disable=SC2086  # extra options split into words on purpose
    NANOVLLM_LOG_LEVEL=info .carry/nanovllm_$v bench throughput --backend cuda --model /tmp/q06 ${extra[$v]} \
      --json-out "$OUT/tput_${v}_$i.json" > "$OUT/tput_${v}_$i.log" 2>&1
    printf '%-4s %s | %s\n' "$v" "$(grep -oE 'in [0-9.]+ s: [0-9]+ output tok/s' "$OUT/tput_${v}_$i.log")" \
      "$(grep -oE 'achieved [0-9.]+%|decode-only steps [0-9.]+ s|with prefill [0-9.]+ s|captured [0-9]+ decode graphs.* in [0-9.]+ s' "$OUT/tput_${v}_$i.log" | tr '\n' ' ')"
  done
done
