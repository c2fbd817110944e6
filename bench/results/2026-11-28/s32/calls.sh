#!/usr/bin/env bash
# Session 32 (2026-11-28): the scripts of its device calls, verbatim, one section per former file under
# "# ## <its path> {#id}" (the separate files: git show f72d536:<its path>). Not one script: run one section
# from the repository root with
#   bash bench/results/2026-11-28/s32/calls.sh ID [ARGS...]
# (no ID lists them). The section runs as its own bash script with $0 = this file, so `dirname "$0"` is the
# folder it was written in.
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## bench/results/2026-11-28/s32/call1.sh {#call1}
#!/usr/bin/env bash
# Session 32, call 1 (one H200): the merged tree (issues 44, 45, 46 items 1-2, 48, 49, 50) — every CUDA test, and
# the HF transformers goldens of the MoE models (scripts/hf_moe_golden.py, CPU torch). Binaries come in
# .carry/bin.tar.xz: new/nanovllm, new/test_cuda (sm_90a). Writes $OUT/*.log and $OUT/golden/.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
git log -1 --format='tree %h %s' 2>/dev/null | tee -a "$OUT/device.txt"
t0=$SECONDS
python3 scripts/hf_moe_golden.py --out "$OUT/golden" > "$OUT/golden.log" 2>&1; echo "golden rc=$? $((SECONDS - t0)) s" | tee -a "$OUT/golden.log"
t0=$SECONDS
timeout 480 /tmp/b/new/test_cuda --gtest_brief=1 > "$OUT/tests.log" 2>&1
echo "test_cuda rc=$? $((SECONDS - t0)) s" | tee -a "$OUT/tests.log"; tail -40 "$OUT/tests.log"

# ## bench/results/2026-11-28/s32/call2.sh {#call2}
#!/usr/bin/env bash
# Session 32, call 2 (one H200): the merged tree's new features measured — Qwen3-MoE (30B-A3B shape, 24 of its 48
# layers), Dual Chunk Attention against plain attention (kernel benchmark), structured outputs' cost in throughput,
# and issue 46's 16K evals (avgpool resident vs offloaded, with and without Quest). Binaries as call 1.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
B=/tmp/b/new
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
step() {  # step NAME SECONDS CMD...: log to $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "== $name: rc=$? $((SECONDS - t0)) s"; tail -n 14 "$OUT/$name.log"
}
step golden 60 bash -c "python3 scripts/hf_moe_golden.py --out /tmp/golden && tar -cJf $OUT/golden.tar.xz -C /tmp golden"
step tests_fixed 120 $B/test_cuda --gtest_filter='CudaStructuredOutputs.*:CudaOffload.SparsePrefillCoversEveryPromptOfABatchedStep'
M=/tmp/q30a3b-24l
step moe_model 120 $B/nanovllm make-test-model --out $M --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}'
step moe_latency 120 $B/nanovllm bench latency --model $M --context 1024 --decode-tokens 64 --prefill 1024,8192 --json-out "$OUT/moe_latency.json"
step moe_throughput 120 $B/nanovllm bench throughput --model $M --num-seqs 256 --min-input 512 --max-input 512 --min-output 512 --max-output 512 --json-out "$OUT/moe_throughput.json"
rm -rf $M
step dca_bench 90 $B/test_cuda --gtest_also_run_disabled_tests --gtest_filter='CudaDualChunkBench.*'
step structured 150 env OUT="$OUT/structured" scripts/bench/device_bench.sh structured $B/nanovllm
mkdir -p /tmp/b/build/tests /tmp/b/build/tools
ln -sf $B/test_cuda /tmp/b/build/tests/test_cuda; ln -sf $B/nanovllm /tmp/b/build/tools/nanovllm
step issue46 200 scripts/issue46_gpu_check.sh /tmp/b/build

# ## bench/results/2026-11-28/s32/call3.sh {#call3}
#!/usr/bin/env bash
# Session 32, call 3 (one H200; two were not lent): the staged-inputs test, then Qwen3-MoE (30B-A3B shape, 24 of
# 48 layers) bs=1 latency and prefill. Binaries as call 1.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
B=/tmp/b/new
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
step() {  # step NAME SECONDS CMD...: log to $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "== $name: rc=$? $((SECONDS - t0)) s"; tail -n "${TAIL:-12}" "$OUT/$name.log"
}
TAIL=6 step tests 240 $B/test_cuda --gtest_brief=1 --gtest_filter='CudaVsCpu.*:CudaMoe*'
M=/tmp/q30a3b-24l
step moe_model 120 $B/nanovllm make-test-model --out $M --preset qwen3-30b-a3b --seed 1 --config-override '{"num_hidden_layers": 24}'
step moe_latency_tp1 120 $B/nanovllm bench latency --model $M --context 1024 --decode-tokens 64 --prefill 1024,8192 --json-out "$OUT/moe_latency_tp1.json"

# ## bench/results/2026-11-28/s32/call4.sh {#call4}
#!/usr/bin/env bash
# Session 32, call 4 (one H200): issue 45's floods against `nanovllm serve` on the GPU (0.6B shape, Qwen3
# tokenizer), a small /v1/completions timed under each (scripts/bench/flood_check.py; target 2 s).
# Binaries as call 1.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
B=/tmp/b/new
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
$B/nanovllm make-test-model --out /tmp/q06t --preset qwen3-0.6b --seed 1 --tokenizer tests/data/qwen3-tokenizer > /dev/null
$B/nanovllm serve --model /tmp/q06t --port 18123 > "$OUT/serve.log" 2>&1 &
for _ in $(seq 60); do curl -s localhost:18123/health > /dev/null && break; sleep 1; done
timeout 240 python3 scripts/bench/flood_check.py 18123 --limit 2 --long-len 16000 2>&1 | tee "$OUT/flood.log"
echo "flood_check rc=${PIPESTATUS[0]}"
kill %1; wait

# ## bench/results/2026-11-28/s32/call5.sh {#call5}
#!/usr/bin/env bash
# Session 32, call 5 (one H200): Dual Chunk Attention's quality past the retrieval fixture's trained length (16K):
# scripts/eval_dca_ruler.sh at 64K and 128K, plain RoPE vs DCA (chunk 16384, local 1024), same prompts.
# Binaries as call 1.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
timeout 400 scripts/eval_dca_ruler.sh /tmp/b/new/nanovllm /tmp/dca-eval > "$OUT/dca_eval.log" 2>&1
echo "eval_dca_ruler rc=$?"
cp /tmp/dca-eval/*.json "$OUT/" 2>/dev/null
grep -vE '^\s*$' "$OUT/dca_eval.log" | grep -vE 'prompts [0-9.]+ s' | tail -40

# ## bench/results/2026-11-28/s32/call6.sh {#call6}
#!/usr/bin/env bash
# Session 32, call 6 (one H200): call 5 at 256K, 512K and 1M tokens (4 samples a cell). Binaries as call 1.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
MAX_POS=1100000 timeout 500 scripts/eval_dca_ruler.sh /tmp/b/new/nanovllm /tmp/dca-eval --context 262144,524288,1048576 \
  --samples 4 --tasks niah_single_1,niah_single_2,niah_multikey_1 --skip-too-short > "$OUT/dca_eval.log" 2>&1
echo "eval_dca_ruler rc=$?"
cp /tmp/dca-eval/*.json "$OUT/" 2>/dev/null
grep -vE '^\s*$' "$OUT/dca_eval.log" | tail -30

# ## bench/results/2026-11-28/s32/call7.sh {#call7}
#!/usr/bin/env bash
# Session 32, call 7 (one H200): the merged tree with issue 51's FP8 checkpoints — every CUDA test, then
# scripts/bench/fp8_device.sh (fp8 kernel tests and micro-benchmarks, HF fp8 goldens, bs=1 latency and 8K prefill of
# the 0.6B and 8B shapes, bf16 vs --quantization fp8 in one run). Binaries as call 1.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
mkdir -p /tmp/b/build/tests /tmp/b/build/tools
ln -sf /tmp/b/new/test_cuda /tmp/b/build/tests/test_cuda; ln -sf /tmp/b/new/nanovllm /tmp/b/build/tools/nanovllm
export NANOVLLM_TEST_DATA=$PWD/tests/data LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
t0=$SECONDS
timeout 200 /tmp/b/new/test_cuda --gtest_brief=1 > "$OUT/tests.log" 2>&1
echo "test_cuda rc=$? $((SECONDS - t0)) s"; grep -E "FAILED|PASSED|SKIPPED \]|tests from" "$OUT/tests.log" | tail -8
OUT=$OUT/fp8 timeout 330 scripts/bench/fp8_device.sh /tmp/b/build > "$OUT/fp8_device.log" 2>&1
echo "fp8_device rc=$?"
tar -cJf "$OUT/fp8_golden.tar.xz" -C "$OUT/fp8" golden 2>/dev/null && rm -rf "$OUT/fp8/golden"
tail -45 "$OUT/fp8_device.log"
