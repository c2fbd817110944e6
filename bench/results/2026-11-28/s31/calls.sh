#!/usr/bin/env bash
# Session 31 (2026-11-28): the scripts of its device calls, verbatim, one section per former file under
# "# ## <its path> {#id}" (the separate files: git show f72d536:<its path>). Not one script: run one section
# from the repository root with
#   bash bench/results/2026-11-28/s31/calls.sh ID [ARGS...]
# (no ID lists them). The section runs as its own bash script with $0 = this file, so `dirname "$0"` is the
# folder it was written in.
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## bench/results/2026-11-28/s31/call1.sh {#call1}
#!/usr/bin/env bash
# Session 31, call 1 (one H200): issue 44's same-call A/B — the refactor (new) against 6dcf662 (old) — and the
# engine-level CUDA tests of the refactored runners. Binaries come in .carry/bin.tar.xz: old/nanovllm,
# new/nanovllm, new/test_cuda (sm_90a). Writes $OUT/*.log.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
OLD=/tmp/b/old/nanovllm NEW=/tmp/b/new/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
git log -1 --format='tree %h %s' 2>/dev/null | tee -a "$OUT/device.txt"
timeout 200 /tmp/b/new/test_cuda --gtest_filter='CudaVsCpu.*:CudaSparseDecode.*:CudaOffload.*:CudaDecodeFusion.*:Models/CudaVsGolden.*' \
  > "$OUT/tests.log" 2>&1; echo "test_cuda rc=$?" | tee -a "$OUT/tests.log"; tail -3 "$OUT/tests.log"
OUT=$OUT/ab scripts/bench/device_bench.sh ab-latency "$OLD" "$NEW" 2 > /dev/null 2>&1; tail -12 "$OUT/ab/ab-latency.log"
OUT=$OUT/ab scripts/bench/device_bench.sh ab-throughput "$OLD" "$NEW" 2 q06 > /dev/null 2>&1; tail -6 "$OUT/ab/ab-throughput.log"

# ## bench/results/2026-11-28/s31/call2.sh {#call2}
#!/usr/bin/env bash
# Session 31, call 2 (one H200, right after call 1): issue 44's A/B of the 128K Quest-over-offload decode step,
# 4B YaRN shape, budget 2048, pages of 16 — old (6dcf662) then new, then old again. Binaries as in call1.sh.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
[ -x /tmp/b/new/nanovllm ] || { mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b; }
for v in old new old; do
  CONTEXTS=131000 OUTLEN=48 BENCH_ARGS="--no-compare --sparse-policy quest --sparse-budget 2048 --sparse-page-size 16" \
    OUT=$OUT/$v scripts/bench/device_bench.sh offload /tmp/b/$v/nanovllm > /dev/null 2>&1
  cat "$OUT/$v/offload.log" >> "$OUT/offload-ab.log"; rm -rf "${OUT:?}/$v"
  grep -hE '^context' "$OUT/offload-ab.log" | tail -2 | sed "s/^/$v: /"
done
