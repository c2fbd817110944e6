#!/usr/bin/env bash
# Session 35 (2026-11-29): the scripts of its device calls, verbatim, one section per former file under
# "# ## <its path> {#id}" (the separate files: git show f72d536:<its path>). Not one script: run one section
# from the repository root with
#   bash bench/results/2026-11-29/s35/calls.sh ID [ARGS...]
# (no ID lists them). The section runs as its own bash script with $0 = this file, so `dirname "$0"` is the
# folder it was written in.
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## bench/results/2026-11-29/s35/call3_ncu_kernels.sh {#call3_ncu_kernels}
#!/usr/bin/env bash
set -uo pipefail
cd .carry && tar xJf bin.tar.xz && cd ..
BIN=.carry/nanovllm; Q=/tmp/q25
[ -d $Q ] || $BIN make-test-model --out $Q --preset qwen2.5-7b-1m --seed 1 > /dev/null
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
timeout 400 ncu --clock-control none --metrics gpu__time_duration.sum --csv -k regex:"prefill_wgmma|select_kernel|last_query|pool_|clear" --launch-count 1200 \
  $BIN bench offload --backend cuda --model $Q --context 262144 --output-len 2 --no-compare "${SP[@]}" > $OUT/ncu.csv 2> $OUT/ncu.err; echo "ncu rc=$?"

# ## bench/results/2026-11-29/s35/call4_call6_bench.sh {#call4_call6_bench}
#!/usr/bin/env bash
# s35 call 3: the coalesced last-query kernel: estimator/DCA device tests, 256K and 1M avgpool prefill over offload.
set -uo pipefail
cd .carry && tar xJf bin.tar.xz && cd ..
BIN=.carry/nanovllm; export NANOVLLM_TEST_DATA=$PWD/tests/data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/card.txt
echo "== tests $(date +%T)"
.carry/test_cuda --gtest_filter='CudaPatternEstimators*:CudaDualChunk*:CudaSparse*:CudaBlockSparse*:CudaOffload*:CudaXAttention*:CudaFlexPrefill*:CudaVerticalSlash*' > $OUT/tests.log 2>&1; echo "rc=$?"
grep -E '^\[  (PASSED|FAILED)|tests ran' $OUT/tests.log | head
Q=/tmp/q25
[ -d $Q ] || $BIN make-test-model --out $Q --preset qwen2.5-7b-1m --seed 1 > /dev/null
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1 --sparse-policy quest --sparse-budget 2048)
echo "== 256k $(date +%T)"
$BIN bench offload --backend cuda --model $Q --context 262144 --output-len 4 --no-compare "${SP[@]}" 2>&1 | tee $OUT/256k.log | grep -E 'prefill'
echo "== 1m $(date +%T)"
$BIN bench offload --backend cuda --model $Q --context 1000000 --output-len 16 --no-compare "${SP[@]}" --json-out $OUT/offload-1m.json 2>&1 | tee $OUT/offload-1m.log | grep -E 'prefill|hit rate'
echo "== done $(date +%T)"

# ## bench/results/2026-11-29/s35/call5_ncu_select.sh {#call5_ncu_select}
#!/usr/bin/env bash
# s35 call 4: ncu detail of one late avgpool select_kernel at 256K (and the 1M-like per-chunk times of select).
set -uo pipefail
cd .carry && tar xJf bin.tar.xz && cd ..
BIN=.carry/nanovllm; Q=/tmp/q25
[ -d $Q ] || $BIN make-test-model --out $Q --preset qwen2.5-7b-1m --seed 1 > /dev/null
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
timeout 300 ncu --clock-control none --set full -k regex:select_kernel --launch-skip 60 --launch-count 1 \
  $BIN bench offload --backend cuda --model $Q --context 262144 --output-len 2 --no-compare "${SP[@]}" > $OUT/ncu_full.txt 2> $OUT/ncu.err; echo "ncu rc=$?"
grep -E "Duration|Warp Cycles Per Issued|Achieved Occupancy|Stall|Registers|Shared Memory Configuration|Dynamic Shared|Block Limit|Theoretical Occ|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Hit|L2 Hit" $OUT/ncu_full.txt | head -40

# ## bench/results/2026-11-29/s35/call7_test_cuda_bench.sh {#call7_test_cuda_bench}
#!/usr/bin/env bash
# s35 call 7: the whole CUDA suite on the final tree (cuBLASLt opened at first use), then bs=1 decode and throughput.
set -uo pipefail
cd .carry && tar xJf bin.tar.xz && cd ..
BIN=.carry/nanovllm; export NANOVLLM_TEST_DATA=$PWD/tests/data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/card.txt
echo "== startup $(date +%T)"; /usr/bin/time -f "nanovllm --version %e s" $BIN --version
echo "== test_cuda $(date +%T)"
timeout 420 .carry/test_cuda > $OUT/test_cuda_full.log 2>&1; echo "rc=$?"
grep -E '^\[  (PASSED|FAILED|SKIPPED)  \] [0-9]|^\[  FAILED' $OUT/test_cuda_full.log | head -20
echo "== bench $(date +%T)"
$BIN make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 > /dev/null
$BIN bench latency --backend cuda --model /tmp/q06 --context 1024 --decode-tokens 64 --prefill 1024 2>&1 | tail -4 | tee $OUT/lat06.log
$BIN bench throughput --backend cuda --model /tmp/q06 2>&1 | tail -3 | tee $OUT/thr06.log
echo "== done $(date +%T)"

# ## bench/results/2026-11-29/s35/call8_issue46.sh {#call8_issue46}
#!/usr/bin/env bash
# s35 call 8: issue 46's GPU check (the fixture at 16K: dense vs avgpool budget 4096 + layer 0 dense, resident /
# offloaded / + Quest 2048) on the final tree (radix select, coalesced last-query scores).
set -uo pipefail
cd .carry && tar xJf bin.tar.xz && cd ..
mkdir -p /tmp/b/tests /tmp/b/tools && cp .carry/test_cuda /tmp/b/tests/ && cp .carry/nanovllm /tmp/b/tools/
export NANOVLLM_TEST_DATA=$PWD/tests/data
timeout 400 scripts/issue46_gpu_check.sh /tmp/b > $OUT/issue46.log 2>&1; echo "rc=$?"
grep -E "^==|PASSED|FAILED|overall|mean|niah" $OUT/issue46.log | head -40
