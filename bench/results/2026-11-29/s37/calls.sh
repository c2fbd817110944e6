#!/usr/bin/env bash
# Session 37 (2026-11-29): the scripts of its device calls, one section per call under "# ## <name> {#id}"; they
# ran from the repository root with the builds in .carry/ (bin.tar.xz: refactor's nanovllm + test_cuda; the helpers'
# branches in .carry/<branch>/build.tar.xz with their scripts/bench). Run one section with
#   bash bench/results/2026-11-29/s37/calls.sh ID [ARGS...]
# (no ID lists them).
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## call1 {#call1}
#!/usr/bin/env bash
# s37 call 1: (a) where the 30B-A3B MoE decode step goes (issue 49): per-kernel times by ncu (decode_tc excluded: its
# cluster combine waits on its peers and hangs under ncu's replay), 4 of 48 layers, bs=1 at 1K;
# (b) issue 47's lanes: 4 and 8 offloaded 128K requests at once, Quest 2048, bf16 vs fp8 (sparse prefill avgpool
# budget 4096 to keep the prefills short; decode does not depend on it).
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
NV=.carry/bin/nanovllm
O=$OUT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > $O/device.txt; free -g >> $O/device.txt
$NV make-test-model --out /tmp/moe4 --preset qwen3-30b-a3b --config-override '{"num_hidden_layers": 4}' --seed 1 >/dev/null
$NV make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' >/dev/null
{
echo "== moe4 bench latency (graphs)"
$NV bench latency --backend cuda --model /tmp/moe4 --context 1024 --decode-tokens 64 --prefill 1024 2>&1 | tail -12
echo "== moe4 bench latency --enforce-eager"
$NV bench latency --backend cuda --model /tmp/moe4 --context 1024 --decode-tokens 64 --prefill 1024 --enforce-eager 2>&1 | tail -6
} > $O/moe_lat.log 2>&1
timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
  -k 'regex:^(?!decode_tc).*' --launch-count 700 \
  $NV bench latency --backend cuda --model /tmp/moe4 --context 1024 --decode-tokens 12 --prefill 1024 --enforce-eager \
  > $O/moe_ncu.csv 2> $O/moe_ncu.err
echo "ncu rc $?" >> $O/moe_ncu.err
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
for kv in bf16 fp8; do
  timeout 200 $NV bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --output-len 48 --no-compare \
    --sparse-policy quest --sparse-budget 2048 --concurrency 4 --kv-cache-dtype $kv "${SP[@]}" \
    > $O/lanes4_$kv.log 2>&1
done
timeout 260 $NV bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --output-len 48 --no-compare \
  --sparse-policy quest --sparse-budget 2048 --concurrency 8 --kv-cache-dtype fp8 --cpu-memory-limit 80 "${SP[@]}" \
  > $O/lanes8_fp8.log 2>&1
free -g >> $O/device.txt

# ## call2 {#call2}
#!/usr/bin/env bash
# s37 call 2: (A) issue 47: the fp8attn branch's fp8 decode kernel (device tests, 8 x 32K resident, 0.6B throughput,
# kernel microbench; its own build in .carry/fp8attn/build); (B) issue 46: the keyscore policy (refactor + keyscore;
# build in .carry/bin): device tests, the scores bench, quality at 64K / 128K on the long fixture against dense and
# Quest (--max-num-seqs 1), and its speed against Quest (8 x 32K resident; one 128K request over offload).
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NANOVLLM_TEST_DATA=$PWD/tests/data
O=$OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/device.txt
# (A)
tar -C .carry/fp8attn -xJf .carry/fp8attn/build.tar.xz
(OUT=$O/fp8attn MODELS_DIR=/tmp/models timeout 260 bash .carry/fp8attn/scripts/bench/fp8_kv_check.sh --resident .carry/fp8attn/build) > $O/fp8attn.log 2>&1
echo "fp8attn rc $?" >> $O/fp8attn.log
# (B)
tar -C .carry -xJf .carry/bin.tar.xz; B=.carry/bin/nanovllm T=.carry/bin/test_cuda
timeout 120 $T --gtest_also_run_disabled_tests --gtest_filter='CudaInt4Keys*:CudaSparse.*' > $O/ks_tests.log 2>&1
echo "tests rc $?" >> $O/ks_tests.log
M=tests/data/retrieval-model-128k
run() {  # run NAME CONTEXT ARGS...
  local name=$1 ctx=$2; shift 2
  echo "== $name @ $ctx: $*" >> $O/ks_quality.log
  timeout 90 $B eval ruler --model $M --context $ctx --samples 8 --tasks all --skip-too-short --max-num-seqs 1 \
    --json-out $O/q_${name}_$ctx.json "$@" 2>&1 | grep -v '^\s*$' | tail -14 >> $O/ks_quality.log
}
for ctx in 131072 65536; do
  run dense $ctx
  run quest2048 $ctx --sparse-policy quest --sparse-budget 2048
  run keyscore2048 $ctx --sparse-policy keyscore --sparse-budget 2048
  run keyscore1024 $ctx --sparse-policy keyscore --sparse-budget 1024
done
run keyscore2048_off 131072 --sparse-policy keyscore --sparse-budget 2048 --enable-cpu-offload --offload-min-tokens 1
Q4=/tmp/models/q4
[ -f $Q4/config.json ] || $B make-test-model --out $Q4 --preset qwen3-4b --seed 1 > /dev/null
for p in quest keyscore; do
  timeout 60 $B bench latency --backend cuda --model $Q4 --batch 8 --context 32768 --decode-tokens 32 --skip-prefill \
    --sparse-policy $p --sparse-budget 2048 > $O/lat_$p.log 2>&1
done
$B make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null
for p in quest keyscore; do
  timeout 90 $B bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --output-len 48 --no-compare \
    --sparse-policy $p --sparse-budget 2048 --sparse-prefill-policy avgpool --sparse-prefill-budget 4096 \
    --sparse-prefill-dense-layers 1 > $O/off_$p.log 2>&1
done

# ## call3 {#call3}
#!/usr/bin/env bash
# s37 call 3: (A) issue 49: the moedec branch's fused MoE decode (its scripts/bench/moe_decode_check.sh: device tests,
# fused vs unfused A/B, bench latency 4 and 24 layers, ncu per kernel); (B) issue 47: the failing fp8attn test's
# messages.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export NANOVLLM_TEST_DATA=$PWD/tests/data
O=$OUT
tar -C .carry/fp8attn -xJf .carry/fp8attn/build.tar.xz
timeout 60 .carry/fp8attn/build/tests/test_cuda --gtest_filter='CudaKvFp8.PagedAttentionMatchesTheCpuOnTheSameCache' > /tmp/f.log 2>&1
grep -v "^\[       OK\|^\[ RUN" /tmp/f.log | head -120 > $O/fp8attn_fail.log
tar -C .carry/moedec -xJf .carry/moedec/build.tar.xz
mkdir -p $O/moe
(OUT=$O/moe timeout 330 bash .carry/moedec/scripts/bench/moe_decode_check.sh .carry/moedec/build) > $O/moe.log 2>&1
echo "moe rc $?" >> $O/moe.log
cd $O/moe && tar -czf ../moe_logs.tgz . && cd .. && rm -rf moe

# ## call4 {#call4}
#!/usr/bin/env bash
# s37 call 4: issue 51: the fp8lt branch's cuBLASLt block-scaled fp8 GEMM vs the mma.sync one (its
# scripts/bench/fp8_gemm_check.sh: device tests under both GEMMs, GEMM TFLOP/s at 8192 rows, 8B prefill 8K and
# 0.6B throughput: bf16 vs fp8 mma vs fp8 cuBLASLt).
set -uo pipefail
export NANOVLLM_TEST_DATA=$PWD/tests/data
O=$OUT
tar -C .carry/fp8lt -xJf .carry/fp8lt/build.tar.xz
(OUT=$O/lt timeout 420 bash .carry/fp8lt/scripts/bench/fp8_gemm_check.sh .carry/fp8lt/build) > $O/fp8lt.log 2>&1
echo "fp8lt rc $?" >> $O/fp8lt.log
cd $O/lt && tar -czf ../lt_logs.tgz . && cd .. && rm -rf lt

# ## call5 {#call5}
#!/usr/bin/env bash
# s37 call 5: the merged tree (refactor at beae45b: keyscore's first kernel, the fused MoE decode, fp8 KV decode on
# the codes with its fix, the cuBLASLt fp8 GEMM with its 16-row split): the whole CUDA suite, then the same-call
# A/Bs of issues 51 (8B prefill 8K, 0.6B throughput: bf16, fp8 cuBLASLt, fp8 mma.sync) and 47 (8 x 32K resident
# decode and 0.6B throughput, bf16 vs fp8 KV; the decode attention kernel alone).
set -uo pipefail
export NANOVLLM_TEST_DATA=$PWD/tests/data
O=$OUT
tar -C .carry -xJf .carry/bin.tar.xz
B=.carry/bin/nanovllm T=.carry/bin/test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/device.txt
timeout 240 $T > /tmp/t.log 2>&1; echo "test_cuda rc $?" > $O/tests.log
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|Failure|Which is|off;" /tmp/t.log | head -60 >> $O/tests.log
timeout 60 $T --gtest_also_run_disabled_tests --gtest_filter='CudaFp8Bench.DISABLED_PrefillShapes:CudaKvFp8Bench.*' 2>&1 | grep -vE "^\[ RUN|^\[       OK|warn\]" > $O/microbench.log
for m in "q06 qwen3-0.6b" "q8 qwen3-8b" "q4 qwen3-4b"; do set -- $m; $B make-test-model --out /tmp/$1 --preset $2 --seed 1 > /dev/null; done
{
for v in "bf16 none cublaslt" "fp8_cublaslt fp8 cublaslt" "fp8_mma fp8 mma"; do
  set -- $v
  echo "== 8B latency $1"; env NANOVLLM_FP8_GEMM=$3 timeout 90 $B bench latency --backend cuda --model /tmp/q8 --quantization $2 --context 1024 --decode-tokens 16 --prefill 8192 2>&1 | grep -E "decode|prefill"
done
for v in "bf16 none cublaslt" "fp8_cublaslt fp8 cublaslt" "fp8_mma fp8 mma"; do
  set -- $v
  echo "== 0.6B throughput $1"; env NANOVLLM_FP8_GEMM=$3 timeout 90 $B bench throughput --backend cuda --model /tmp/q06 --quantization $2 2>&1 | grep -E "throughput|roofline"
done
} > $O/fp8_weights.log 2>&1
{
for kv in auto fp8; do
  echo "== 4B 8 x 32K resident, kv $kv"; timeout 60 $B bench latency --backend cuda --model /tmp/q4 --batch 8 --context 32768 --decode-tokens 32 --skip-prefill --kv-cache-dtype $kv 2>&1 | grep decode
  echo "== 0.6B throughput, kv $kv"; timeout 60 $B bench throughput --backend cuda --model /tmp/q06 --kv-cache-dtype $kv 2>&1 | grep -E "throughput|roofline"
done
} > $O/fp8_kv.log 2>&1

# ## call6 {#call6}
#!/usr/bin/env bash
# s37 call 6: keyscore's tensor-core page scores (refactor with kscore merged): device tests and the scores bench,
# quality again at 64K / 128K (the MMA sums differ from the first kernel's), and its speed beside Quest (8 x 32K
# resident; one 128K request over offload).
set -uo pipefail
export NANOVLLM_TEST_DATA=$PWD/tests/data
O=$OUT
tar -C .carry -xJf .carry/bin.tar.xz
B=.carry/bin/nanovllm T=.carry/bin/test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/device.txt
timeout 90 $T --gtest_also_run_disabled_tests --gtest_filter='CudaInt4Keys*:CudaSparse.*' 2>&1 | grep -vE "^\[ RUN" > $O/ks_tests.log
M=tests/data/retrieval-model-128k
run() {  # run NAME CONTEXT ARGS...
  local name=$1 ctx=$2; shift 2
  echo "== $name @ $ctx: $*" >> $O/ks_quality.log
  timeout 90 $B eval ruler --model $M --context $ctx --samples 8 --tasks all --skip-too-short --max-num-seqs 1 \
    "$@" 2>&1 | grep -v '^\s*$' | tail -14 >> $O/ks_quality.log
}
run keyscore2048 131072 --sparse-policy keyscore --sparse-budget 2048
run keyscore1024 131072 --sparse-policy keyscore --sparse-budget 1024
run keyscore2048 65536 --sparse-policy keyscore --sparse-budget 2048
$B make-test-model --out /tmp/q4 --preset qwen3-4b --seed 1 > /dev/null
{
for p in quest keyscore; do
  echo "== 8 x 32K resident, $p 2048"
  timeout 60 $B bench latency --backend cuda --model /tmp/q4 --batch 8 --context 32768 --decode-tokens 32 --skip-prefill \
    --sparse-policy $p --sparse-budget 2048 2>&1 | grep decode
done
} > $O/ks_speed.log
$B make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null
for p in quest keyscore; do
  echo "== one 128K request over offload, $p 2048" >> $O/ks_speed.log
  timeout 90 $B bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --output-len 48 --no-compare \
    --sparse-policy $p --sparse-budget 2048 --sparse-prefill-policy avgpool --sparse-prefill-budget 4096 \
    --sparse-prefill-dense-layers 1 2>&1 | grep -E "hit rate|decode" >> $O/ks_speed.log
done

# ## call7 {#call7}
#!/usr/bin/env bash
# s37 call 7: issue 47's lanes with the fp8 KV cache: 4 and 8 offloaded 128K requests at once, Quest 2048 (dense
# prefill: fp8 with sparse prefill is refused on CUDA), host pool limited to 80 GiB.
set -uo pipefail
O=$OUT
tar -C .carry -xJf .carry/bin.tar.xz
B=.carry/bin/nanovllm
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/device.txt
$B make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' > /dev/null
for n in 4 8; do
  echo "== $n x 128K, fp8 KV, Quest 2048" >> $O/lanes.log
  timeout 230 $B bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --output-len 32 --no-compare \
    --sparse-policy quest --sparse-budget 2048 --concurrency $n --kv-cache-dtype fp8 --cpu-memory-limit 80 \
    2>&1 | grep -vE "^\s*$" | tail -6 >> $O/lanes.log
done

