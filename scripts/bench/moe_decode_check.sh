#!/usr/bin/env bash
# The MoE decode fusion (issue #49, docs/moe.md "Decode kernels"): correctness, then speed. From the repository root
# on an H200 box with a CUDA build tree (carried or built here by steps.sh).
#
#   OUT=./moe-decode-out scripts/bench/moe_decode_check.sh [BUILD_DIR]     BUILD_DIR default build/cuda
#
# Steps (seconds on one H200, after the build):
#   1. tests: test_cuda CudaMoe* (the general kernels, moe_mlp eager + graph replay under another routing, the
#      engine's CUDA greedy tokens against the CPU backend's) and MoeDecode* (the decode kernels against the CPU
#      reference and the general kernels)                                                         ~40
#   2. ab: DISABLED_ MoeDecodeBench.FusedVsUnfused: the sparse MLP alone, 8 layers of the Qwen3-30B-A3B shape in
#      one CUDA graph, old (5 launches) vs fused (3) path, T = 1 .. 32, us/layer and x floor; MoeGemmBench: the
#      experts' tiled GEMMs (wgmma vs mma.sync) at T = 256 .. 8192, TFLOP/s                        ~25
#   3. make-test-model qwen3-30b-a3b with 4 and 24 of its 48 layers (~6 + 31 GB in /tmp)        ~50
#   4. bench latency bs=1 @1K, graphs: ms/step vs the floor of the bytes a step reads, 4 and 24 layers  ~40
#   5. ncu per kernel, 4 layers, eager (decode_tc excluded: its cluster combine hangs under ncu's replay);
#      summary: mean us per kernel over the decode launches                                       ~60
# Output: $OUT (default ./moe-decode-out): one log per step, moe_ncu.csv, ncu_summary.txt.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
BUILD=${1:-build/cuda}
OUT=${OUT:-./moe-decode-out}
mkdir -p "$OUT"
source "$(dirname "$0")/steps.sh"  # run, FAILED, the build when missing
NV="$BUILD/tools/nanovllm"
STEP_TAIL=12 run tests "$BUILD/tests/test_cuda" --gtest_filter='CudaMoe*:MoeDecode*'
run ab "$BUILD/tests/test_cuda" --gtest_also_run_disabled_tests --gtest_filter='MoeDecodeBench.*:MoeGemmBench.*'
for L in 4 24; do
  [ -f /tmp/moe$L/config.json ] || run make_model_$L "$NV" make-test-model --out /tmp/moe$L \
    --preset qwen3-30b-a3b --seed 1 --config-override "{\"num_hidden_layers\": $L}"
  STEP_TAIL=14 run latency_$L "$NV" bench latency --backend cuda --model /tmp/moe$L --context 1024 \
    --decode-tokens 64 --prefill 1024
done
rm -rf /tmp/moe24  # 31 GB of the box's disk
echo "== ncu (timeout 120 s)"
timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
  -k 'regex:^(?!decode_tc).*' --launch-count 700 \
  "$NV" bench latency --backend cuda --model /tmp/moe4 --context 1024 --decode-tokens 12 --prefill 1024 \
  --enforce-eager > "$OUT/moe_ncu.csv" 2> "$OUT/moe_ncu.err"
echo "ncu exit $?" | tee -a "$OUT/moe_ncu.err"
# Mean time per kernel over the decode launches: those after the last prefill kernel (the tiled MoE GEMM).
python3 - "$OUT/moe_ncu.csv" > "$OUT/ncu_summary.txt" <<'PY'
import csv, io, sys, collections
text = open(sys.argv[1], errors="replace").read()
rows = list(csv.DictReader(io.StringIO(text[text.find('"ID"'):])))
rows = [r for r in rows if r.get("Metric Name") == "gpu__time_duration.sum"]
last_prefill = max([i for i, r in enumerate(rows) if "moe_gemm_kernel" in r["Kernel Name"]], default=-1)
rows = rows[last_prefill + 1:]
acc = collections.OrderedDict()
for r in rows:
    full = r["Kernel Name"].replace("<unnamed>", "anon").split("(")[0].removeprefix("void ")  # "ns::kernel<args>": keep the template args
    base, _, targs = full.partition("<")
    name = (base.rsplit("::", 1)[-1] + ("<" + targs if targs else ""))[:48]
    acc.setdefault(name, []).append(float(r["Metric Value"].replace(",", "")) / 1e3)  # ns, "6,016"
print(f"{'kernel':48s} {'launches':>8s} {'mean us':>8s} {'total us':>9s}")
for name, v in sorted(acc.items(), key=lambda kv: -sum(kv[1])):
    print(f"{name:48s} {len(v):8d} {sum(v)/len(v):8.2f} {sum(v):9.1f}")
PY
cat "$OUT/ncu_summary.txt"
echo "moe_decode_check: $([ $FAILED -eq 0 ] && echo all steps passed || echo SOME STEPS FAILED) (logs in $OUT)"
exit $FAILED
