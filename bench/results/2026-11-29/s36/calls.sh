#!/usr/bin/env bash
# Session 36 (2026-11-29): the scripts of its device calls, one section per call under
# "# ## <name> {#id}"; they ran from .carry/ of the repository root (binary in .carry/bin). Run one section
# from the repository root with
#   bash bench/results/2026-11-29/s36/calls.sh ID [ARGS...]
# (no ID lists them). The section runs as its own bash script with $0 = this file, so `dirname "$0"` is the
# folder it was written in.
exec bash "$(dirname "$0")/../../run_section.sh" "$0" "$@"

# ## call1 {#call1}
#!/usr/bin/env bash
# s36 call 1: the 128K retrieval fixture (issue 46 item 3). YaRN-only probe of the 16K fixture, then training.
# (The HF evaluation at the end of training failed: hf_eval_ruler.py was not beside the copied script.)
set -uo pipefail
cd "$(dirname "$0")/.."
xz -d -k .carry/bin/nanovllm.xz; B=.carry/bin/nanovllm
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a $OUT/device.txt
# YaRN probe (no training): the 16K fixture with rope_parameters yarn factor 8 over 16384.
Y=$(mktemp -d); P=$(mktemp -d)
for f in model.safetensors tokenizer.json tokenizer_config.json generation_config.json; do
  ln -s $PWD/tests/data/retrieval-model/$f $Y/$f; ln -s $PWD/tests/data/retrieval-model/$f $P/$f; done
python3 - "$Y" "$P" <<'PY'
import json, sys
c = json.load(open("tests/data/retrieval-model/config.json"))
c["max_position_embeddings"] = 262144
json.dump(c, open(sys.argv[2] + "/config.json", "w"), indent=1)
c["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 8.0, "original_max_position_embeddings": 16384}
json.dump(c, open(sys.argv[1] + "/config.json", "w"), indent=1)
PY
for v in P Y; do
  d=${!v}
  timeout 60 $B eval ruler --model $d --context 16384,65536,131072 --samples 4 \
    --tasks niah_single_1,niah_single_2,niah_multikey_1 --skip-too-short 2>&1 | tail -8 | sed "s/^/[$v] /" | tee -a $OUT/yarn_probe.txt
done
timeout 470 python3 .carry/train_retrieval_model.py --nanovllm $B --init-from tests/data/retrieval-model \
  --out $OUT/retrieval-model-128k --max-position-embeddings 262144 \
  --stages "0.25:8192,16384,32768;0.55:16384,32768,65536;1:32768,65536,131072" \
  --lr 3e-4 --warmup-steps 30 --train-minutes 5 --eval-contexts 32768,131072 --eval-samples 4 --eval-batch-size 1 \
  > $OUT/train.log 2>&1
echo "train rc=$?" | tee -a $OUT/train.log
tail -40 $OUT/train.log

# ## call2 {#call2}
#!/usr/bin/env bash
# s36 call 2: issue 46 items 3-4. Pick the 128K fixture (trained T vs YaRN Y, dense, all tasks), then the record.
# (The Quest rows of this call are mixed with dense decode steps: default --max-num-seqs. Call 3 measures Quest alone.)
set -uo pipefail
cd "$(dirname "$0")/.."
xz -d -k .carry/bin/nanovllm.xz; B=.carry/bin/nanovllm
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
T=.carry/t128k
Y=$(mktemp -d)
for f in model.safetensors tokenizer.json tokenizer_config.json generation_config.json; do
  ln -s $PWD/tests/data/retrieval-model/$f $Y/$f; done
python3 - "$Y" <<'PY'
import json, sys
c = json.load(open("tests/data/retrieval-model/config.json"))
c["max_position_embeddings"] = 131072
c["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 8.0, "original_max_position_embeddings": 16384}
json.dump(c, open(sys.argv[1] + "/config.json", "w"), indent=1)
PY
cp $Y/config.json $OUT/yarn_config.json
mkdir -p $OUT/pick $OUT/rec
for v in T Y; do
  d=${!v}
  echo "== candidate $v" | tee -a $OUT/pick.log
  timeout 120 $B eval ruler --model $d --context 16384,32768,65536,131072 --samples 4 --tasks all --skip-too-short \
    --json-out $OUT/pick/$v.json 2>&1 | grep -v '^\s*$' | tee -a $OUT/pick.log
done
M=$(python3 -c "
import json
t, y = (json.load(open('$OUT/pick/%s.json' % v))['mean'].get('131072') or 0 for v in 'TY')
print('$T' if t > y else '$Y')")
echo "picked $M" | tee -a $OUT/pick.log
ctx=32768,65536,131072
common=(--model $M --context $ctx --samples 6 --tasks all --skip-too-short --first-token-logprobs 20)
run() {  # NAME ARGS...
  local name=$1; shift
  local ref=(); [ "$name" != dense ] && ref=(--kl-reference $OUT/rec/dense.json)
  echo "== $name: $*" | tee -a $OUT/rec.log
  local t0=$(date +%s.%N)
  timeout 150 $B eval ruler "${common[@]}" --json-out $OUT/rec/$name.json "${ref[@]}" "$@" 2>&1 | grep -v '^\s*$' >> $OUT/rec.log
  echo "rc=$? wall $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s" | tee -a $OUT/rec.log
}
off=(--enable-cpu-offload --offload-min-tokens 1)
budget=(--sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1)
run dense
run quest2048 --sparse-policy quest --sparse-budget 2048
run quest2048_off "${off[@]}" --sparse-policy quest --sparse-budget 2048
run avgpool_budget_quest2048_off "${budget[@]}" "${off[@]}" --sparse-policy quest --sparse-budget 2048
run avgpool --sparse-prefill-policy avgpool
run avgpool_budget "${budget[@]}"
run xattention --sparse-prefill-policy xattention
run minference --sparse-prefill-policy minference
run flexprefill --sparse-prefill-policy flexprefill
run quest1024 --sparse-policy quest --sparse-budget 1024
run quest4096 --sparse-policy quest --sparse-budget 4096
run quest1024_off "${off[@]}" --sparse-policy quest --sparse-budget 1024
run quest4096_off "${off[@]}" --sparse-policy quest --sparse-budget 4096
run dense_off "${off[@]}"
python3 .carry/summarize.py $OUT/rec | tee $OUT/summary.md

# ## call3 {#call3}
#!/usr/bin/env bash
# s36 call 3: the 128K fixture against HF; Quest at 128K measured alone (--max-num-seqs 1); issue 45 floods and
# issue 50's structured-output cost on the current tree.
set -uo pipefail
cd "$(dirname "$0")/.."
xz -d -k .carry/bin/nanovllm.xz; B=$PWD/.carry/bin/nanovllm
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
M=tests/data/retrieval-model-128k
ls -laL $M/model.safetensors | tee -a $OUT/device.txt
# 1. HF against nanovllm on the same 128K prompts (independent reference).
T=niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multivalue
$B eval ruler --model $M --context 131072 --samples 4 --tasks $T --json-out $OUT/hf_nano.json 2>&1 | grep -v '^\s*$' | tee $OUT/hf.log
$B eval ruler --model $M --context 131072 --samples 4 --tasks $T --dump-prompts /tmp/p128.jsonl 2>/dev/null
timeout 150 python3 scripts/hf_eval_ruler.py --model $M --prompts /tmp/p128.jsonl --compare $OUT/hf_nano.json \
  --json-out $OUT/hf_128k.json 2>&1 | grep -v '^\s*$\|Loading\|it/s' | tail -25 | tee -a $OUT/hf.log
# 2. Quest alone at 128K (and 64K), all tasks, 8 samples.
mkdir -p /tmp/q
common=(--model $M --context 131072 --samples 8 --tasks all --skip-too-short --max-num-seqs 1 --first-token-logprobs 20)
run() {
  local name=$1; shift
  echo "== $name: $*" >> $OUT/quest.log
  local t0=$(date +%s.%N)
  timeout 120 $B eval ruler "${common[@]}" --json-out /tmp/q/$name.json "$@" 2>&1 | grep -v '^\s*$' >> $OUT/quest.log
  echo "rc=$? wall $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s" | tee -a $OUT/quest.log
}
run dense
run quest2048 --sparse-policy quest --sparse-budget 2048
run quest4096 --sparse-policy quest --sparse-budget 4096
run quest2048_page8 --sparse-policy quest --sparse-budget 2048 --block-size 8
run quest2048_off --sparse-policy quest --sparse-budget 2048 --enable-cpu-offload --offload-min-tokens 1
python3 .carry/summarize.py /tmp/q | tee $OUT/quest_summary.md
# 3. Issue 45: floods against serve (0.6B shape, Qwen3 tokenizer).
$B make-test-model --out /tmp/q06t --preset qwen3-0.6b --seed 1 --tokenizer tests/data/qwen3-tokenizer > /dev/null
$B serve --model /tmp/q06t --port 18123 > $OUT/serve.log 2>&1 &
for _ in $(seq 60); do curl -s localhost:18123/health > /dev/null && break; sleep 1; done
timeout 200 python3 scripts/bench/flood_check.py 18123 --limit 2 --long-len 16000 2>&1 | tee $OUT/flood.log
echo "flood_check rc=${PIPESTATUS[0]}" | tee -a $OUT/flood.log
kill %1; wait
# 4. Issue 50: structured outputs' cost.
OUT=$OUT/structured timeout 200 scripts/bench/device_bench.sh structured $B 2>&1 | tail -12

# ## call4 {#call4}
#!/usr/bin/env bash
# s36 call 4: fp8 GEMV variants (issue 51): correctness, micro-benchmarks and bs=1 decode of the 8B / 0.6B shapes.
#   variant 0 = the kernel on main; 1 = next step's codes loaded before this step's products (register double
#   buffer); 2 = 1 with twice the rows per warp (8 at T=1); 3 = twice the rows, no double buffer.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
B=/tmp/b/nanovllm; TC=/tmp/b/test_cuda
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} NANOVLLM_TEST_DATA=$PWD/tests/data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
for v in 0 1 2 3; do
  echo "== variant $v tests" | tee -a $OUT/fp8.log
  NANOVLLM_FP8_GEMV_VARIANT=$v timeout 60 $TC --gtest_filter='CudaFp8Linear.Gemv*:CudaFp8Linear.Determ*' --gtest_brief=1 2>&1 | tail -3 | tee -a $OUT/fp8.log
  echo "== variant $v decode shapes" | tee -a $OUT/fp8.log
  NANOVLLM_FP8_GEMV_VARIANT=$v timeout 60 $TC --gtest_filter='CudaFp8Bench.DISABLED_DecodeShapes' --gtest_also_run_disabled_tests 2>&1 | grep " us " | tee -a $OUT/fp8.log
done
for m in q06 q8; do
  preset=$([ $m = q06 ] && echo qwen3-0.6b || echo qwen3-8b)
  $B make-test-model --out /tmp/$m --preset $preset --seed 1 > /dev/null
done
for round in 1 2; do
  for m in q8 q06; do
    echo "== $m bf16 r$round" >> $OUT/lat.log
    timeout 90 $B bench latency --backend cuda --model /tmp/$m --quantization none --context 1024 --decode-tokens 64 --prefill 1024 2>&1 | grep -E "decode bs=1" | sed "s/^/$m bf16 r$round: /" | tee -a $OUT/lat.log
    for v in 0 1 2 3; do
      NANOVLLM_FP8_GEMV_VARIANT=$v timeout 90 $B bench latency --backend cuda --model /tmp/$m --quantization fp8 --context 1024 --decode-tokens 64 --prefill 1024 2>&1 | grep -E "decode bs=1" | sed "s/^/$m fp8 v$v r$round: /" | tee -a $OUT/lat.log
    done
  done
done

# ## call5 {#call5}
#!/usr/bin/env bash
# s36 call 5: sparse prefill on the 128K fixture at 128K with 16 samples (issue 46's 98% target, less noise).
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p /tmp/b && tar -xJf .carry/bin.tar.xz -C /tmp/b
B=/tmp/b/nanovllm
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/device.txt
M=tests/data/retrieval-model-128k
mkdir -p /tmp/r
common=(--model $M --context 131072 --samples 16 --tasks all --skip-too-short --first-token-logprobs 20)
run() {
  local name=$1; shift
  local ref=(); [ "$name" != dense ] && ref=(--kl-reference /tmp/r/dense.json)
  echo "== $name: $*" >> $OUT/sp.log
  timeout 100 $B eval ruler "${common[@]}" --json-out /tmp/r/$name.json "${ref[@]}" "$@" 2>&1 | grep -v '^\s*$' >> $OUT/sp.log
  echo "$name rc=$?"
}
run dense
run avgpool_budget --sparse-prefill-policy avgpool --sparse-prefill-budget 4096 --sparse-prefill-dense-layers 1
run avgpool --sparse-prefill-policy avgpool
run xattention --sparse-prefill-policy xattention
run flexprefill --sparse-prefill-policy flexprefill
run flexprefill_l0 --sparse-prefill-policy flexprefill --sparse-prefill-dense-layers 1
run minference --sparse-prefill-policy minference
python3 .carry/summarize.py /tmp/r | tee $OUT/sp_summary.md
