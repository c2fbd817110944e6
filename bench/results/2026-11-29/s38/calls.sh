#!/usr/bin/env bash
# Session 38 (2026-11-29): the scripts of its device calls, one section per call under "# ## <name> {#id}"; they
# ran from the repository root with the builds in .carry/ (bin.tar.xz: refactor's nanovllm + test_cuda; the helpers'
# branches in .carry/<branch>/: build.tar.xz or a compressed nanovllm, with their scripts/bench). Run one section with
#   bash bench/results/2026-11-29/s38/calls.sh ID [ARGS...]
# (no ID lists them).
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## call1 {#call1}
#!/usr/bin/env bash
# s38 call 1: (a) issue 47's lanes: where the offloaded Quest step of several 128K-class requests goes (ncu per
# kernel of the decode-only kernels, 4 lanes at 64K, fp8 KV) and how the step grows with the lanes (1, 2, 4 at 64K);
# (b) issue 47's quality: the fp8 KV cache on the long fixture at 64K and 128K, dense and Quest 2048, vs bf16.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
O=$OUT
tar -C .carry -xJf .carry/bin.tar.xz
B=.carry/bin/nanovllm
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/device.txt
$B make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' >/dev/null
# (b) first: cheap
M=tests/data/retrieval-model-128k
run() {  # run NAME CONTEXT ARGS...
  local name=$1 ctx=$2; shift 2
  echo "== $name @ $ctx: $*" >> $O/fp8_quality.log
  local t0=$SECONDS
  timeout 90 $B eval ruler --model $M --context $ctx --samples 8 --tasks all --skip-too-short --max-num-seqs 1 \
    --json-out $O/q_${name}_$ctx.json "$@" 2>&1 | grep -v '^\s*$' | tail -14 >> $O/fp8_quality.log
  echo "   ($((SECONDS - t0)) s)" >> $O/fp8_quality.log
}
for ctx in 131072 65536; do
  run dense_bf16 $ctx
  run dense_fp8 $ctx --kv-cache-dtype fp8
  run quest2048_fp8 $ctx --kv-cache-dtype fp8 --sparse-policy quest --sparse-budget 2048
  run keyscore2048_fp8 $ctx --kv-cache-dtype fp8 --sparse-policy keyscore --sparse-budget 2048
done
# (a) step vs lanes
for n in 1 2 4; do
  t0=$SECONDS
  timeout 120 $B bench offload --backend cuda --model /tmp/q4-yarn --context 65536 --output-len 24 --no-compare \
    --sparse-policy quest --sparse-budget 2048 --concurrency $n --kv-cache-dtype fp8 > $O/lanes${n}_64k.log 2>&1
  echo "rc $? ($((SECONDS - t0)) s)" >> $O/lanes${n}_64k.log
done
t0=$SECONDS
timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
  -k 'regex:^(plan_kernel|fetch_kernel|quest_|select_pages|gather_key_rows|gemv|decode_kernel|combine_kernel)' --launch-count 1500 \
  $B bench offload --backend cuda --model /tmp/q4-yarn --context 65536 --output-len 6 --no-compare \
    --sparse-policy quest --sparse-budget 2048 --concurrency 4 --kv-cache-dtype fp8 > $O/lanes_ncu.csv 2> $O/lanes_ncu.err
echo "ncu rc $? ($((SECONDS - t0)) s)" >> $O/lanes_ncu.err
xz -9 $O/lanes_ncu.csv

# ## call2 {#call2}
#!/usr/bin/env bash
# s38 call 2: (A) issue 51: the fp8bulk branch's bulk-copy fp8 GEMV (its scripts/bench/fp8_gemv_check.sh: device
# tests, decode-shape bench per launch shape, bs=1 decode bf16 vs fp8 for 0.6B and 8B); (B) issue 47: the fp8sp
# branch's fp8 KV cache with sparse prefill on CUDA (its scripts/bench/fp8_sparse_prefill_check.sh: device tests,
# long-fixture quality at 128K bf16 vs fp8 with avgpool budget 4096, 128K offload prefill bf16 vs fp8).
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
O=$OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/device.txt
for b in fp8bulk fp8sp; do tar -C .carry/$b -xJf .carry/$b/build.tar.xz; done
t0=$SECONDS
(OUT=$O/fp8bulk MODELS_DIR=/tmp/models timeout 270 bash .carry/fp8bulk/scripts/bench/fp8_gemv_check.sh .carry/fp8bulk/build) > $O/fp8bulk.log 2>&1
echo "fp8bulk rc $? ($((SECONDS - t0)) s)" >> $O/fp8bulk.log
t0=$SECONDS
(OUT=$O/fp8sp MODELS_DIR=/tmp/models timeout 280 bash .carry/fp8sp/scripts/bench/fp8_sparse_prefill_check.sh .carry/fp8sp/build) > $O/fp8sp.log 2>&1
echo "fp8sp rc $? ($((SECONDS - t0)) s)" >> $O/fp8sp.log
cd $O && tar -czf logs.tgz fp8bulk fp8sp && rm -rf fp8bulk fp8sp

# ## call3 {#call3}
#!/usr/bin/env bash
# s38 call 3: (A) issue 47: the lanes branch (one plan + one fetch launch a layer for every row; head-major fp8
# scales in the host pool): its device tests, then Quest 2048 over offload at 64K, 1 and 4 lanes, fp8 and bf16;
# (B) issue 46: the keyoracle branch's oracle: eval ruler at 128K, 16 samples, dense / keyscore / keyscore8 /
# keyscore-exact 2048 and 4096; (C) issue 51: the fp8bulk branch with its measured pick: bs=1 decode bf16 vs fp8,
# 8B and 0.6B.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
export NANOVLLM_TEST_DATA=$PWD/tests/data
O=$OUT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/device.txt
tar -C .carry/lanes -xJf .carry/lanes/build.tar.xz
xz -d .carry/keyoracle/nanovllm.xz .carry/fp8bulk/nanovllm.xz
L=.carry/lanes/build
mkdir -p $O/lanes
timeout 120 $L/tests/test_cuda --gtest_filter='CudaPageCache.*:CudaKvFp8.PageCache*:CudaOffload.Sparse*:CudaOffload.Fp8*:CudaOffload.Concurrent*' > /tmp/lt.log 2>&1
echo "tests rc $?" > $O/lanes/tests.log; grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|Failure|Which is" /tmp/lt.log | head -40 >> $O/lanes/tests.log
$L/tools/nanovllm make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' >/dev/null
for v in "fp8 1" "fp8 4" "bf16 4"; do
  set -- $v; t0=$SECONDS
  timeout 100 $L/tools/nanovllm bench offload --backend cuda --model /tmp/q4-yarn --context 65536 --output-len 24 --no-compare \
    --sparse-policy quest --sparse-budget 2048 --concurrency $2 --kv-cache-dtype $1 > $O/lanes/quest_$1_x$2.log 2>&1
  echo "rc $? ($((SECONDS - t0)) s)" >> $O/lanes/quest_$1_x$2.log
done
# (B)
K=.carry/keyoracle/nanovllm; M=tests/data/retrieval-model-128k
mkdir -p $O/oracle
run() {  # run NAME ARGS...
  local name=$1; shift; local t0=$SECONDS
  echo "== $name: $*" >> $O/oracle/quality.log
  timeout 90 $K eval ruler --model $M --context 131072 --samples 16 --tasks all --skip-too-short --max-num-seqs 1 \
    --json-out $O/oracle/$name.json "$@" 2>&1 | grep -v '^\s*$' | tail -14 >> $O/oracle/quality.log
  echo "   (rc ${PIPESTATUS[0]}, $((SECONDS - t0)) s)" >> $O/oracle/quality.log
}
run dense
run keyscore2048 --sparse-policy keyscore --sparse-budget 2048
run keyscore8_2048 --sparse-policy keyscore8 --sparse-budget 2048
run exact2048 --sparse-policy keyscore-exact --sparse-budget 2048
run exact4096 --sparse-policy keyscore-exact --sparse-budget 4096
# (C)
F=.carry/fp8bulk/nanovllm
mkdir -p $O/fp8bulk
for m in "q06 qwen3-0.6b" "q8 qwen3-8b"; do set -- $m; $F make-test-model --out /tmp/$1 --preset $2 --seed 1 > /dev/null; done
for m in q8 q06; do
  for q in none fp8; do
    timeout 60 $F bench latency --backend cuda --model /tmp/$m --quantization $q --context 1024 --decode-tokens 32 \
      --skip-prefill 2>&1 | grep -E "decode bs" > $O/fp8bulk/lat_${m}_$q.log
  done
done
cd $O && tar -czf logs.tgz lanes oracle fp8bulk && rm -rf lanes oracle fp8bulk

# ## call4 {#call4}
#!/usr/bin/env bash
# s38 call 4: the merged tree (refactor: fp8sp + lanes + fp8bulk on 2d53265): the whole CUDA suite; issue 47's
# lanes at 128K with the fp8 KV cache (now with the sparse prefill: avgpool budget 4096 + layer 0 dense), 1, 4 and 8
# requests, Quest 2048, and bf16 at 4; the fp8 KV cache's quality on the long fixture, 16 samples, 64K and 128K.
set -uo pipefail
export PATH=$PATH:/usr/local/cuda/bin
export NANOVLLM_TEST_DATA=$PWD/tests/data
O=$OUT
tar -C .carry -xJf .carry/bin.tar.xz
B=.carry/bin/nanovllm T=.carry/bin/test_cuda
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $O/device.txt
t0=$SECONDS
timeout 290 $T > /tmp/t.log 2>&1; echo "test_cuda rc $? ($((SECONDS - t0)) s)" > $O/tests.log
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|Failure|Which is|exception" /tmp/t.log | head -60 >> $O/tests.log
$B make-test-model --out /tmp/q4-yarn --preset qwen3-4b --seed 1 --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}' >/dev/null
SP=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
lanes() {  # lanes KV N [ARGS...]
  local kv=$1 n=$2; shift 2; local t0=$SECONDS
  echo "== $n x 128K, $kv KV, Quest 2048" >> $O/lanes.log
  timeout 120 $B bench offload --backend cuda --model /tmp/q4-yarn --context 131000 --output-len 48 --no-compare \
    --sparse-policy quest --sparse-budget 2048 --concurrency $n --kv-cache-dtype $kv "${SP[@]}" "$@" 2>&1 |
    grep -E "^(device|offload|context|peak)" >> $O/lanes.log
  echo "rc ${PIPESTATUS[0]} ($((SECONDS - t0)) s)" >> $O/lanes.log
}
lanes fp8 1
lanes fp8 4
lanes fp8 8 --cpu-memory-limit 80
lanes bf16 4
M=tests/data/retrieval-model-128k
run() {  # run NAME CONTEXT ARGS...
  local name=$1 ctx=$2; shift 2; local t0=$SECONDS
  echo "== $name @ $ctx: $*" >> $O/fp8_quality.log
  timeout 70 $B eval ruler --model $M --context $ctx --samples 16 --tasks all --skip-too-short --max-num-seqs 1 \
    "$@" 2>&1 | grep -v '^\s*$' | tail -14 >> $O/fp8_quality.log
  echo "   (rc ${PIPESTATUS[0]}, $((SECONDS - t0)) s)" >> $O/fp8_quality.log
}
for ctx in 131072 65536; do
  run dense_bf16 $ctx
  run dense_fp8 $ctx --kv-cache-dtype fp8
done
