#!/usr/bin/env bash
# ncu profile of the GPU sampler's kernels over `CudaSampling.DISABLED_Benchmark` (all its cases), plus
# the SASS of the chunk pass. Usage (device): bash scripts/device_profile_sampler.sh [kernel-regex]
# Prints, per grid size, the mean time, instructions, issue and pipe activity, and the average stall
# cycles per issued instruction by reason; $OUT/sampler_ncu.csv holds the raw values.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
REGEX=${1:-chunk_pass|sample_kernel}
cuobjdump -sass .carry/test_cuda 2>/dev/null |
  awk '/Function : .*chunk_pass_kernel/{f=1} /Function : /&&!/chunk_pass_kernel/{f=0} f' > "$OUT/chunk_pass.sass"
echo "chunk_pass SASS: $(grep -c '/\*[0-9a-f]\{4\}\*/' "$OUT/chunk_pass.sass") instructions"
S=smsp__average_warp_latency_issue_stalled
ncu --clock-control none --kernel-name "regex:$REGEX" --csv --log-file "$OUT/sampler_ncu.csv" --metrics \
gpu__time_duration.sum,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,\
sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,$S\_barrier.ratio,$S\_long_scoreboard.ratio,\
$S\_math_pipe_throttle.ratio,$S\_wait.ratio,$S\_short_scoreboard.ratio,$S\_no_instruction.ratio,\
$S\_branch_resolving.ratio,$S\_dispatch_stall.ratio,$S\_mio_throttle.ratio,$S\_lg_throttle.ratio,\
$S\_not_selected.ratio,$S\_selected.ratio \
  .carry/test_cuda --gtest_also_run_disabled_tests --gtest_filter='CudaSampling.DISABLED_Benchmark' >/dev/null 2>&1
python3 - "$OUT/sampler_ncu.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]
ki, gi, mi, vi, ii = (h.index(x) for x in ("Kernel Name", "Grid Size", "Metric Name", "Metric Value", "ID"))
per = {}
for r in rows[1:]:
    name = r[mi].replace("smsp__average_warp_latency_issue_stalled_", "stall_").split(".")[0]
    d = per.setdefault(int(r[ii]), {"k": r[ki].split("(")[0].split("::")[-1], "g": r[gi]})
    d[name] = float(r[vi].replace(",", ""))
groups = collections.OrderedDict()
for _, d in sorted(per.items()):
    groups.setdefault((d["k"], d["g"]), []).append(d)
for (k, g), l in groups.items():
    keys = [x for x in l[0] if x not in ("k", "g")]
    print(k, g, f"x{len(l)}", " ".join(f"{x}={sum(d[x] for d in l) / len(l):.1f}" for x in keys))
PY
