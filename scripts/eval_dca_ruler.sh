#!/usr/bin/env bash
# Plain RoPE vs Dual Chunk Attention past a model's trained length, side by side with `nanovllm eval ruler`
# (docs/dual_chunk_attention.md, issue #48). The retrieval fixture (tests/data/retrieval-model) was trained up to
# 16K tokens (its README); this runs it at longer contexts twice on identical prompts: once with plain RoPE and
# once with a dual_chunk_attention_config whose chunk is the trained length. Both variants are directories of
# symlinks to the fixture's weights and tokenizer with an edited config.json (max_position_embeddings raised so
# the engine accepts the contexts; the DCA one also gets the config). Nothing in the fixture is changed.
#
#   scripts/eval_dca_ruler.sh BIN OUT [eval options...]
#
# BIN: a `nanovllm` binary; OUT: a folder for the variants and the reports (OUT/plain.json, OUT/dca.json).
# Eval options default to: --context 65536,131072 --samples 8 --tasks niah_single_1,niah_single_2,niah_multikey_1
# --skip-too-short (4x and 8x the trained length). Environment:
#   MODEL        the model to vary (default tests/data/retrieval-model)
#   CHUNK_SIZE   dual_chunk_attention_config.chunk_size (default 16384: the trained length)
#   LOCAL_SIZE   its local_size (default 1024; chunk_size - local_size must be a multiple of 128 on CUDA)
#   ORIGINAL     its original_max_position_embeddings (default CHUNK_SIZE; 0: no logit scaling)
#   MAX_POS      max_position_embeddings of both variants (default 262144)
#   ENGINE_ARGS  extra engine options for both runs (e.g. "--backend cpu", "--enable-cpu-offload")
#
# GPU (H200), about 2 minutes: scripts/eval_dca_ruler.sh build/cuda/tools/nanovllm /tmp/dca-eval
set -euo pipefail

if [ $# -lt 2 ]; then
  sed -n '2,21p' "$0"
  exit 2
fi
BIN=$1
OUT=$2
shift 2
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODEL=$(cd "${MODEL:-$REPO/tests/data/retrieval-model}" && pwd)
CHUNK_SIZE=${CHUNK_SIZE:-16384}
LOCAL_SIZE=${LOCAL_SIZE:-1024}
ORIGINAL=${ORIGINAL:-$CHUNK_SIZE}
MAX_POS=${MAX_POS:-262144}
EVAL_ARGS=("$@")
if [ ${#EVAL_ARGS[@]} -eq 0 ]; then
  EVAL_ARGS=(--context 65536,131072 --samples 8 --tasks niah_single_1,niah_single_2,niah_multikey_1 --skip-too-short)
fi

# variant NAME DCA_JSON: OUT/NAME with the fixture's files linked and config.json edited (DCA_JSON "" for none).
variant() {
  local dir=$OUT/$1
  rm -rf "$dir"
  mkdir -p "$dir"
  for f in "$MODEL"/*; do
    [ "$(basename "$f")" = config.json ] || ln -s "$f" "$dir/"
  done
  python3 - "$MODEL/config.json" "$dir/config.json" "$MAX_POS" "$2" <<'EOF'
import json, sys
src, dst, max_pos, dca = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
c = json.load(open(src))
c["max_position_embeddings"] = max_pos
if dca:
    c["dual_chunk_attention_config"] = json.loads(dca)
json.dump(c, open(dst, "w"), indent=2)
EOF
}

mkdir -p "$OUT"
variant plain ""
variant dca "{\"chunk_size\": $CHUNK_SIZE, \"local_size\": $LOCAL_SIZE, \"original_max_position_embeddings\": $ORIGINAL}"
read -r -a ENGINE <<< "${ENGINE_ARGS:-}"
for v in plain dca; do
  echo "== $v: $BIN eval ruler --model $OUT/$v ${EVAL_ARGS[*]} ${ENGINE[*]}"
  "$BIN" eval ruler --model "$OUT/$v" "${EVAL_ARGS[@]}" "${ENGINE[@]}" --json-out "$OUT/$v.json" 2>&1 | tee "$OUT/$v.log"
done
echo "reports: $OUT/plain.json $OUT/dca.json (logs: $OUT/plain.log $OUT/dca.log)"
