#!/usr/bin/env bash
# Dual Chunk Attention with the sparse policies on the GPU machine (docs/sparse_attention.md, "With Dual Chunk
# Attention"; issue #48), from the repository root, one call:
#   1. tests: the DCA + sparse device tests (CUDA ops against the CPU, the engine) and the device tests of the kernels
#      they share (DCA, block-sparse prefill, estimators, Quest, offload);
#   2. ruler: the retrieval fixture (trained to 16K) with Dual Chunk Attention (chunks of 16K, as
#      scripts/eval_dca_ruler.sh) at 64K and 128K, dense vs vertical-slash sparse prefill (minference at its adaptive
#      default), the same prompts; prints the sparse / dense score ratio (target >= 98%);
#   3. 1m: the Qwen2.5-7B-1M shape (make-test-model --preset qwen2.5-7b-1m: its dual_chunk_attention_config) over
#      offload at 1M tokens: prefill with DCA + sparse prefill (avgpool, budget 4096, layer 0 dense: the sparse 1M
#      record's settings) and decode with DCA + Quest (budget 2048); targets prefill <= 60 s, decode <= 20 ms/token.
#      SKIP_1M=1 leaves it out.
#
#   scripts/bench/dca_sparse_device.sh [BUILD_DIR]   (default build/cuda; configured here when it has no build.ninja)
#
# Output: OUT (default ./dca-sparse-out): tests.log, dense.json / sparse.json (+ .log), offload-1m.json (+ .log).
# Run time on one H200 once test_cuda and nanovllm are built: tests ~45 s, ruler ~70 s, 1m ~130 s (make-test-model
# ~25 s, pinned host KV ~20 s, prefill <= 60 s, 16 decode steps) = ~4 minutes. MODELS_DIR (default /tmp) keeps the
# 7B checkpoint between calls.
set -euo pipefail
B=${1:-build/cuda}
OUT=${OUT:-$PWD/dca-sparse-out}
MODELS=${MODELS_DIR:-/tmp}
export PATH=$PATH:/usr/local/cuda/bin
export NANOVLLM_TEST_DATA=${NANOVLLM_TEST_DATA:-$PWD/tests/data}
mkdir -p "$OUT"
if [ ! -f "$B/build.ninja" ]; then
  cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES=90a -B "$B"
fi
cmake --build "$B" --target test_cuda nanovllm -j"$(nproc)"
BIN=$B/tools/nanovllm
stage() { echo "== $1 ($(date +%T))"; }

stage tests
"$B/tests/test_cuda" --gtest_filter='CudaDualChunkSparse.*:CudaDualChunk.*:CudaBlockSparsePrefill.*:CudaPatternEstimators*:CudaSparse.*:CudaOffload.Sparse*' \
  2>&1 | tee "$OUT/tests.log" | grep -E '^\[  (PASSED|FAILED) |^\[  FAILED|tests ran' || true

stage ruler
MODEL=$OUT/fixture-dca
rm -rf "$MODEL"
mkdir -p "$MODEL"
for f in "$PWD"/tests/data/retrieval-model/*; do
  [ "$(basename "$f")" = config.json ] || ln -s "$f" "$MODEL/"
done
python3 - "$PWD/tests/data/retrieval-model/config.json" "$MODEL/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["max_position_embeddings"] = 262144
c["dual_chunk_attention_config"] = {"chunk_size": 16384, "local_size": 1024, "original_max_position_embeddings": 16384}
json.dump(c, open(sys.argv[2], "w"), indent=2)
EOF
EVAL=(eval ruler --model "$MODEL" --context 65536,131072 --samples 8
      --tasks niah_single_1,niah_single_2,niah_multikey_1 --skip-too-short --max-num-seqs 1)
"$BIN" "${EVAL[@]}" --json-out "$OUT/dense.json" > "$OUT/dense.log" 2>&1
"$BIN" "${EVAL[@]}" --sparse-prefill-policy minference --json-out "$OUT/sparse.json" > "$OUT/sparse.log" 2>&1
python3 - "$OUT/dense.json" "$OUT/sparse.json" <<'EOF'
import json, sys
d, s = (json.load(open(p)) for p in sys.argv[1:3])
ratio = s["overall"] / d["overall"] if d["overall"] else float("nan")
print(f"DCA dense {d['overall']:.2f}, DCA + minference {s['overall']:.2f} (density {s.get('sparse_prefill_density')}): "
      f"{100 * ratio:.1f}% of dense (target >= 98%)")
EOF

if [ "${SKIP_1M:-0}" = 1 ]; then exit 0; fi
stage 1m
Q=$MODELS/q25-7b-1m-dca
[ -f "$Q/config.json" ] || "$BIN" make-test-model --out "$Q" --preset qwen2.5-7b-1m --seed 1
"$BIN" bench offload --backend cuda --model "$Q" --context 1000000 --output-len 16 --no-compare \
  --sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1 \
  --sparse-policy quest --sparse-budget 2048 --json-out "$OUT/offload-1m.json" 2>&1 | tee "$OUT/offload-1m.log" |
  grep -E 'prefill|decode|context' || true
stage done
