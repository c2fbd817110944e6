#!/bin/bash
# Layer taps on the GPU machine: CUDA backend (paged and offload) vs HF transformers, tiny and Qwen3-0.6B shape.
set -u
D=$(cd "$(dirname "$0")" && pwd)
N=/tmp/nanovllm
xz -dc "$D/nanovllm.xz" > $N && chmod +x $N
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/card.txt
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a $OUT/card.txt
# tiny preset with head_dim 64 (the CUDA attention kernels are built for 64 / 128 / 256), 4 layers, GQA 4:2
$N make-test-model --out /tmp/tiny --config-override '{"num_hidden_layers": 4, "head_dim": 64}' --seed 3 > /dev/null
[ "${MODELS:-tiny q06}" = "tiny" ] || $N make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1 > /dev/null
PROMPT=$(python3 -c "import random; r=random.Random(0); print(','.join(str(r.randrange(3, 500)) for _ in range(40)))")
C="python3 $D/compare_taps.py"
for m in ${MODELS:-tiny q06}; do
  G="$N generate --model /tmp/$m --prompt-ids $PROMPT --temperature 0 --max-tokens 8 --ignore-eos"
  $G --backend cuda --dump-taps /tmp/taps/$m-cuda-paged > $OUT/gen-$m-cuda-paged.log 2>&1
  $G --backend cuda --dump-taps /tmp/taps/$m-cuda-offload --enable-cpu-offload --offload-min-tokens 1 > $OUT/gen-$m-cuda-offload.log 2>&1
  timeout 60 $G --backend cpu --dump-taps /tmp/taps/$m-cpu-paged > $OUT/gen-$m-cpu-paged.log 2>&1
  for p in cuda-paged cuda-offload; do
    for dt in bf16 fp32; do
      $C --taps /tmp/taps/$m-$p --model /tmp/$m --dtype $dt --json-out $OUT/cmp-$m-$p-hf-$dt.json > $OUT/cmp-$m-$p-hf-$dt.txt 2>&1
      echo "$m $p vs HF $dt: rc=$?"
    done
  done
  $C --taps /tmp/taps/$m-cuda-offload --reference /tmp/taps/$m-cuda-paged --rtol 0 --atol 0 > $OUT/cmp-$m-offload-vs-paged.txt 2>&1; echo "$m offload vs paged (exact): rc=$?"
  $C --taps /tmp/taps/$m-cpu-paged --model /tmp/$m --dtype fp32 --json-out $OUT/cmp-$m-cpu-hf-fp32.json > $OUT/cmp-$m-cpu-hf-fp32.txt 2>&1; echo "$m cpu vs HF fp32: rc=$?"
  $C --taps /tmp/taps/$m-cuda-paged --reference /tmp/taps/$m-cpu-paged > $OUT/cmp-$m-cuda-vs-cpu.txt 2>&1; echo "$m cuda vs cpu: rc=$?"
done
tail -n 3 $OUT/cmp-*.txt
cd $OUT && tar czf all.tgz --remove-files *.txt *.json *.log
