#!/usr/bin/env bash
# Issue 49's several-GPU targets (docs/moe.md, "Several GPUs"), not measured yet, on an H200 box of 2 or 4 GPUs:
#   2 GPUs (nvidia-h200-x2): the Qwen3-30B-A3B shape, all 48 layers (61 GB; the box's 128 GB disk holds it), bs=1
#     decode @1K at TP 1 and TP 2 alternating, same call; target TP2 <= 0.65x TP1;
#   4 GPUs (nvidia-h200-x4): the Qwen3-235B-A22B shape with LAYERS of its 94 layers (default 24: ~120 GB of the box's
#     235 GB disk; every layer is alike and the floor is computed from the same config), bs=1 decode @1K at TP 4
#     against the four-GPU floor that bench latency prints; target <= 1.3x.
#
#   scripts/bench/moe_tp_check.sh GPUS [BUILD_DIR]   GPUS: 2 or 4; BUILD_DIR: a CUDA build tree or a folder holding
#                                                    tools/nanovllm
#
# Steps (estimated): making the model 60-150 s, each latency run 30-90 s (loading the weights). Output: $OUT (default
# ./moe-tp-out), one log per step and a summary.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
GPUS=${1:?usage: moe_tp_check.sh 2|4 [BUILD_DIR]}
BUILD=${2:-build/cuda}
OUT=${OUT:-./moe-tp-out}
MODELS=${MODELS_DIR:-/tmp}
LAYERS=${LAYERS:-24}
mkdir -p "$OUT"
NEEDS=tools/nanovllm
source "$(dirname "$0")/steps.sh"  # run, FAILED, the build when missing
NV=$BUILD/tools/nanovllm
lat() {  # lat NAME MODEL TP
  run "$1" "$NV" bench latency --backend cuda --model "$2" --tensor-parallel-size "$3" --context 1024 \
    --decode-tokens 64 --skip-prefill
}
if [ "$GPUS" = 2 ]; then
  M=$MODELS/q30a3b
  make_model "$M" qwen3-30b-a3b
  for r in 1 2; do lat "tp1_$r" "$M" 1; lat "tp2_$r" "$M" 2; done
  echo "== summary (target: TP2 <= 0.65x TP1)"
  for f in tp1_1 tp2_1 tp1_2 tp2_2; do echo "$f: $(grep -h 'decode bs=1' "$OUT/$f.log")"; done
else
  M=$MODELS/q235-${LAYERS}l
  make_model "$M" qwen3-235b-a22b --config-override "{\"num_hidden_layers\": $LAYERS}"
  for r in 1 2; do lat "tp4_$r" "$M" 4; done
  echo "== summary (target: <= 1.3x the four-GPU floor)"
  for f in tp4_1 tp4_2; do echo "$f: $(grep -h 'decode bs=1' "$OUT/$f.log")"; done
fi
echo "moe_tp_check: $([ "$FAILED" -eq 0 ] && echo all steps passed || echo SOME STEPS FAILED) (logs in $OUT)"
exit $FAILED
