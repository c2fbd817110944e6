#!/usr/bin/env bash
# Per-kernel GPU time of a few steps of `bench throughput` (Qwen3-0.6B shape), by ncu.
# Usage (device): bash scripts/device_profile_step.sh [decode|prefill] [launch-skip] [launch-count]
# Only kernels inside the runner's NVTX range of that step kind count (launch-skip included). Writes
# $OUT/ncu.log (ncu's CSV) and prints the time per kernel name, summed over the window. The default
# window is ~2 decode steps at batch ~224; `prefill 640 320` is about one prefill step of ~8K tokens.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
KIND=${1:-decode}
SKIP=${2:-35000}
COUNT=${3:-600}
B=.carry/nanovllm
[ -d /tmp/q06 ] || $B make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 >/dev/null 2>&1
ncu --clock-control none --graph-profiling node --nvtx --nvtx-include "$KIND/" --launch-skip "$SKIP" --launch-count "$COUNT" \
    --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu.log" \
    $B bench throughput --backend cuda --model /tmp/q06 > "$OUT/bench_stdout.log" 2>&1
python3 - "$OUT/ncu.log" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ki, vi, ui = hdr.index("Kernel Name"), hdr.index("Metric Value"), hdr.index("Metric Unit")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows:
    v = float(r[vi].replace(",", "")); v = v / 1e3 if r[ui] in ("ns", "nsecond") else (v * 1e3 if r[ui] in ("ms", "msecond") else v)
    name = r[ki].split("(")[0][:90]
    tot[name] += v; cnt[name] += 1
s = sum(tot.values())
print(f"{len(rows)} kernels, {s:.1f} us of GPU time")
for k, v in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"{v:10.1f} us {100*v/s:5.1f}%  x{cnt[k]:4d}  {k}")
PY
