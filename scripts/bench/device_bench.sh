#!/usr/bin/env bash
# nano-vLLM benchmarks and device checks. Run this ON the GPU machine, from a checkout of the repository.
# Binaries are arguments: BIN is a `nanovllm` executable (build/cuda/tools/nanovllm or a copy brought to
# the machine); TESTS is a build directory holding tests/test_cuda, or a test_cuda executable.
#
#   scripts/bench/device_bench.sh tests           TESTS [GTEST_FILTER]   test_cuda (DISABLED_ benches run when named)
#   scripts/bench/device_bench.sh sanitize        TESTS GTEST_FILTER     compute-sanitizer memcheck + racecheck
#   scripts/bench/device_bench.sh latency         BIN [q06] [q4] [q8]    bs=1 decode @1K, prefill, weight load
#   scripts/bench/device_bench.sh throughput      BIN                    offline throughput, Qwen3-0.6B shape
#   scripts/bench/device_bench.sh ab-latency      OLD_BIN NEW_BIN [N]    alternate old/new N times (2), 0.6B and 8B
#   scripts/bench/device_bench.sh ab-throughput   OLD_BIN NEW_BIN [N] [q06] [q8]  alternate old/new N times (3),
#                                                                        on the 0.6B shape unless models are named
#   scripts/bench/device_bench.sh hf-compare      BIN [agree|throughput] HF transformers bf16: greedy agreement
#                                                                        (0.6B, 4B) and throughput on one workload
#   scripts/bench/device_bench.sh offload         BIN [4b-yarn|1m]       layer-wise CPU KV offload, 128K or 1M context
#   scripts/bench/device_bench.sh serve           BIN                    bench serve next to bench throughput
#   scripts/bench/device_bench.sh structured      BIN                    64 requests under a JSON schema vs none
#                                                                        (0.6B shape, Qwen3 tokenizer; ~90 s)
#   scripts/bench/device_bench.sh tokenizer       BIN [CORPUS]           bench tokenizer vs HF tokenizers, 1 thread
#   scripts/bench/device_bench.sh profile-step    BIN [decode|prefill] [SKIP] [COUNT]  ncu: GPU time per kernel
#                                                                        of bench throughput steps (0.6B)
#   scripts/bench/device_bench.sh profile-kernels TESTS GTEST_FILTER [KERNEL_REGEX]    ncu: time, instructions,
#                                                                        issue and stall reasons per kernel
#
# Output: $OUT/MODE.log (each command and its whole output) and $OUT/MODE.jsonl (one labelled JSON report per
# line); profile modes also write $OUT/MODE.csv (ncu's raw values). A summary is printed at the end.
# Test checkpoints are made on first use, in $MODELS_DIR (default /tmp), by the mode's (new) binary:
#   q06 = nanovllm make-test-model --out /tmp/q06 --preset qwen3-0.6b --seed 1   (q4: qwen3-4b, q8: qwen3-8b);
#   q4-yarn, q7m-1m, q06-tok: the offload and serve shapes (mk() below).
#
# Environment:
#   OUT              output folder (default ./bench-out)
#   BENCH_ARGS       extra options for every bench command of a one-binary mode (e.g. --no-async-scheduling)
#   OLD_ARGS/NEW_ARGS, OLD_ENV/NEW_ENV  extra bench options / environment assignments for one side of an A/B;
#                    the same binary twice with NEW_ENV="NANOVLLM_TUNE_LINEAR=0" is an A/B of that switch
#   HF_BATCH         HF transformers' batch (default 256; 128 on cards under 100 GiB, where 256 runs out of memory)
#   HF_TIMEOUT       seconds for the HF throughput run (default 450; ~250 s on an H100 at batch 128)
#   CONTEXTS, OUTLEN offload 4b-yarn contexts (4096,32768,131000) and output tokens (16)
#
# Each device call can land on another host of the same GPU type; those differ by ~1-1.5%. Compare binaries
# only inside one call: that is what the ab-* modes are for.
#
# What became of the old scripts/device_*.sh drivers: device_final.sh = tests + hf-compare + latency;
# device_hf_compare.sh = hf-compare BIN throughput; device_ab_latency.sh / device_ab_throughput.sh = ab-*;
# device_ab_env.sh = ab-latency BIN BIN with OLD_ENV/NEW_ENV; device_async_ab.sh = ab-* with
# NEW_ARGS=--no-async-scheduling; device_run_all.sh, device_perf_iter.sh, device_bench_baseline.sh = tests
# (with a DISABLED_ filter for micro-benchmarks) + sanitize + latency + throughput; device_offload.sh = offload;
# device_tokenizer_bench.sh = tokenizer; device_profile_step.sh = profile-step; device_profile_sampler.sh =
# profile-kernels TESTS CudaSampling.DISABLED_Benchmark 'chunk_pass|sample_kernel' (its SASS dump is gone:
# cuobjdump -sass TESTS); device_persistent_decode.sh is gone with the persistent decode kernel.
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
export NANOVLLM_TEST_DATA=${NANOVLLM_TEST_DATA:-$REPO/tests/data}
MODELS=${MODELS_DIR:-/tmp}
HF_TIMEOUT=${HF_TIMEOUT:-450}
TMPD=$(mktemp -d)
trap 'rm -rf "$TMPD"' EXIT
FAILED=0

usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 2; }
die() { echo "device_bench.sh: $*" >&2; exit 2; }
CALLER=$PWD
abspath() { case $1 in /*) echo "$1" ;; *) echo "$CALLER/$1" ;; esac; }
need_bin() {
  local p
  p=$(abspath "$1")
  if [ ! -f "$p" ] || [ ! -x "$p" ]; then die "not an executable: $1"; fi
  echo "$(cd "$(dirname "$p")" && pwd)/$(basename "$p")"
}
test_bin() {  # TESTS: a build directory or the test_cuda executable itself
  if [ -d "$(abspath "$1")" ]; then need_bin "$1/tests/test_cuda"; else need_bin "$1"; fi
}

MODE=${1:-}
case $MODE in '' | -h | --help) usage ;; esac
shift
OUT=$(abspath "${OUT:-bench-out}")
mkdir -p "$OUT" || die "cannot make $OUT"
cd "$REPO" || die "no repository at $REPO"
LOG=$OUT/$MODE.log
JSONL=$OUT/$MODE.jsonl
: > "$LOG"
: > "$JSONL"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.memory --format=csv,noheader
  date -u; echo "repo $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?'); $MODE $*"; } >> "$LOG" 2>&1
head -3 "$LOG"

# run LABEL CMD...: CMD's output goes to the log; a failure is counted and reported, the mode goes on.
run() {
  local label=$1 rc; shift
  printf '\n== %s: %s\n' "$label" "$*" >> "$LOG"
  "$@" >> "$LOG" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    FAILED=$((FAILED + 1))
    echo "!! $label: exit status $rc (see $LOG)"
  fi
  return $rc
}
# add_json KIND LABEL FILE: one line {"kind", "label", "report"} in MODE.jsonl.
add_json() {
  [ -s "$3" ] || return 0
  python3 -c 'import json, sys; print(json.dumps({"kind": sys.argv[1], "label": sys.argv[2], "report": json.load(open(sys.argv[3]))}))' \
    "$1" "$2" "$3" >> "$JSONL"
}
# Lines worth seeing while it runs.
show() { grep -hE "$1" "${2:-$LOG}" | tail -n "${3:-20}"; }

# mk NAME: make the test checkpoint $MODELS/NAME with $MAKER unless it is there.
mk() {
  local dir=$MODELS/$1
  local -a args
  case $1 in
    q06) args=(--preset qwen3-0.6b) ;;
    q4) args=(--preset qwen3-4b) ;;
    q8) args=(--preset qwen3-8b) ;;
    # Qwen3-4B shape with YaRN factor 4 over 32768 original positions (131072), untied: the 128K offload run.
    q4-yarn) args=(--preset qwen3-4b --config-override '{"max_position_embeddings": 131072, "tie_word_embeddings": false, "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}') ;;
    # Qwen2.5-7B-1M shape (15.2 GB bf16, 56 KiB of KV per token): the 1M-token offload run.
    q7m-1m) args=(--preset qwen3-8b --config-override '{"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","hidden_size":3584,"intermediate_size":18944,"num_hidden_layers":28,"num_attention_heads":28,"num_key_value_heads":4,"head_dim":null,"vocab_size":152064,"max_position_embeddings":1010000,"rope_theta":10000000.0,"tie_word_embeddings":false}') ;;
    # Qwen3-0.6B shape with the Qwen3 tokenizer, for bench serve (it sends text).
    q06-tok) args=(--preset qwen3-0.6b --tokenizer "$REPO/tests/data/qwen3-tokenizer") ;;
    *) die "unknown model $1 (q06, q4, q8, q4-yarn, q7m-1m, q06-tok)" ;;
  esac
  [ -f "$dir/config.json" ] && return 0
  run "make $1" "$MAKER" make-test-model --out "$dir" "${args[@]}" --seed 1 || die "make-test-model $1 failed"
}

# One bench latency run: latency_one LABEL BIN ENV ARGS PREFILL MODEL_DIR
latency_one() {
  local label=$1 bin=$2 envs=$3 opts=$4 prefill=$5 dir=$6 j=$TMPD/lat.json
  rm -f "$j"
  # shellcheck disable=SC2086  # ENV and ARGS are word lists on purpose
  run "latency $label" env NANOVLLM_LOG_LEVEL=info $envs "$bin" bench latency --backend cuda --model "$dir" \
    --context 1024 --decode-tokens 64 --prefill "$prefill" $opts --json-out "$j"
  add_json latency "$label" "$j"
}
throughput_one() {  # LABEL BIN ENV ARGS MODEL_DIR [more bench options]
  local label=$1 bin=$2 envs=$3 opts=$4 dir=$5 j=$TMPD/tp.json
  shift 5
  rm -f "$j"
  # shellcheck disable=SC2086
  run "throughput $label" env NANOVLLM_LOG_LEVEL=info $envs "$bin" bench throughput --backend cuda --model "$dir" \
    "$@" $opts --json-out "$j"
  add_json throughput "$label" "$j"
}

case $MODE in
  tests)
    [ $# -ge 1 ] || usage
    T=$(test_bin "$1") || exit 2
    FILTER=${2:-*}
    extra=()
    case $FILTER in *DISABLED_*) extra=(--gtest_also_run_disabled_tests) ;; esac
    run test_cuda "$T" --gtest_filter="$FILTER" "${extra[@]}"
    show '^\[  (PASSED|FAILED) |^\[  SKIPPED \] [0-9]|FAILED  \]|tests ran'
    ;;

  sanitize)
    [ $# -ge 2 ] || usage
    T=$(test_bin "$1") || exit 2
    for tool in memcheck racecheck; do
      run "$tool" compute-sanitizer --tool "$tool" "$T" --gtest_filter="$2"
    done
    show 'ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) '
    ;;

  latency)
    [ $# -ge 1 ] || usage
    B=$(need_bin "$1") || exit 2
    MAKER=$B
    shift
    [ $# -gt 0 ] || set -- q06 q8
    for m in "$@"; do
      case $m in q8) prefill=1024,8192,32768 ;; *) prefill=1024,8192 ;; esac
      mk "$m"
      latency_one "$m" "$B" "" "${BENCH_ARGS:-}" "$prefill" "$MODELS/$m"
    done
    show 'loaded .* GB of weights|decode bs=1|prefill [0-9]+ tokens'
    ;;

  throughput)
    [ $# -ge 1 ] || usage
    B=$(need_bin "$1") || exit 2
    MAKER=$B
    mk q06
    throughput_one q06 "$B" "" "${BENCH_ARGS:-}" "$MODELS/q06"
    show 'time split|throughput:|roofline floor'
    ;;

  structured)
    # Structured outputs' cost on the GPU: the same 64 x (128 in, 512 out) workload free and under a schema
    # no random model finishes in 512 tokens (so both produce the same tokens); the masks are computed on
    # the host while each step's forward runs. Issue 50's target: >= 0.9x the free output tok/s.
    [ $# -ge 1 ] || usage
    B=$(need_bin "$1") || exit 2
    MAKER=$B
    mk q06-tok
    for side in free schema; do
      extra=(--num-seqs 64 --min-input 128 --max-input 128 --min-output 512 --max-output 512)
      [ $side = schema ] && extra+=(--json-schema "$REPO/scripts/bench/long_answer_schema.json")
      throughput_one "$side" "$B" "" "${BENCH_ARGS:-}" "$MODELS/q06-tok" "${extra[@]}"
    done
    run "grammar host costs" "$B" bench grammar --model "$MODELS/q06-tok"
    show 'throughput:|compile|mask per token'
    ;;

  ab-latency | ab-throughput)
    [ $# -ge 2 ] || usage
    OLD=$(need_bin "$1") || exit 2
    NEW=$(need_bin "$2") || exit 2
    MAKER=$NEW
    declare -A BINS=([old]=$OLD [new]=$NEW) ENVS=([old]="${OLD_ENV:-}" [new]="${NEW_ENV:-}")
    declare -A ARGS=([old]="${OLD_ARGS:-}" [new]="${NEW_ARGS:-}")
    if [ "$MODE" = ab-latency ]; then
      N=${3:-2}
      for m in q06 q8; do
        mk "$m"
        dir=$MODELS/$m
        for i in $(seq "$N"); do
          for v in old new; do
            latency_one "$m $v $i" "${BINS[$v]}" "${ENVS[$v]}" "${ARGS[$v]}" 1024 "$dir"
            show 'decode bs=1' "$LOG" 1 | sed "s/^/$m $v $i: /"
          done
        done
      done
    else
      N=${3:-3}
      shift $(($# < 3 ? $# : 3))
      [ $# -gt 0 ] || set -- q06
      for m in "$@"; do
        mk "$m"
        dir=$MODELS/$m
        for i in $(seq "$N"); do
          for v in old new; do
            throughput_one "$m $v $i" "${BINS[$v]}" "${ENVS[$v]}" "${ARGS[$v]}" "$dir"
            show 'roofline floor' "$LOG" 1 | sed "s/^/$m $v $i: /"
          done
        done
      done
    fi
    ;;

  hf-compare)
    [ $# -ge 1 ] || usage
    B=$(need_bin "$1") || exit 2
    MAKER=$B
    WHAT=${2:-both}
    if [ "$WHAT" = both ] || [ "$WHAT" = agree ]; then
      # 32 random prompts x 64 greedy steps of HF transformers (bf16, sdpa); nano-vLLM teacher-forced along them.
      for m in q06 q4; do
        mk "$m"
        dir=$MODELS/$m
        rm -f "$TMPD/agree.json"
        run "agreement $m" env PYTHONUNBUFFERED=1 python3 "$REPO/scripts/hf_bf16_agreement.py" --nanovllm "$B" \
          --model "$dir" --json-out "$TMPD/agree.json"
        add_json agreement "$m" "$TMPD/agree.json"
      done
    fi
    if [ "$WHAT" = both ] || [ "$WHAT" = throughput ]; then
      if [ -z "${HF_BATCH:-}" ]; then
        mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
        HF_BATCH=256
        [ "${mib:-0}" -lt 102400 ] && HF_BATCH=128
      fi
      mk q06
      dir=$MODELS/q06
      throughput_one q06 "$B" "" "${BENCH_ARGS:-}" "$dir" --dump-workload "$TMPD/wl.json"
      rm -f "$TMPD/hf.json"
      run "HF transformers throughput (batch $HF_BATCH)" env PYTHONUNBUFFERED=1 timeout "$HF_TIMEOUT" python3 \
        "$REPO/scripts/hf_bench_throughput.py" --model "$dir" --workload "$TMPD/wl.json" --batch "$HF_BATCH" \
        --json-out "$TMPD/hf.json"
      add_json hf_throughput q06 "$TMPD/hf.json"
    fi
    show 'top-1 agreement|roofline floor|HF transformers:'
    ;;

  offload)
    [ $# -ge 1 ] || usage
    B=$(need_bin "$1") || exit 2
    MAKER=$B
    j=$TMPD/offload.json
    case ${2:-4b-yarn} in
      4b-yarn)
        mk q4-yarn
        # shellcheck disable=SC2086
        run "offload 4b-yarn" "$B" bench offload --backend cuda --model "$MODELS/q4-yarn" \
          --context "${CONTEXTS:-4096,32768,131000}" --output-len "${OUTLEN:-16}" ${BENCH_ARGS:-} --json-out "$j"
        add_json offload 4b-yarn "$j" ;;
      1m)
        # ~20 s of pinned allocation (53 GiB of host KV), ~560 s of prefill on an H200, 37 GiB of GPU memory.
        mk q7m-1m
        # shellcheck disable=SC2086
        run "offload 1m" "$B" bench offload --backend cuda --model "$MODELS/q7m-1m" --context 1000000 \
          --output-len 4 --no-compare ${BENCH_ARGS:-} --json-out "$j"
        add_json offload 1m "$j" ;;
      *) usage ;;
    esac
    show '^context|offload off|peak GPU memory'
    ;;

  serve)
    [ $# -ge 1 ] || usage
    B=$(need_bin "$1") || exit 2
    MAKER=$B
    mk q06-tok
    dir=$MODELS/q06-tok
    # The same workload both ways: 512 requests of 512 random prompt tokens and 512 output tokens, greedy.
    throughput_one offline "$B" "" "${BENCH_ARGS:-}" "$dir" --num-seqs 512 --min-input 512 --max-input 512 \
      --min-output 512 --max-output 512 --temperature 0
    rm -f "$TMPD/serve.json"
    # shellcheck disable=SC2086
    run "serve" "$B" bench serve --backend cuda --model "$dir" --num-clients 256 --num-requests 512 \
      --input-len 512 --output-len 512 ${BENCH_ARGS:-} --json-out "$TMPD/serve.json"
    add_json serve server "$TMPD/serve.json"
    show 'throughput:|output tok/s|TTFT|TPOT'
    ;;

  tokenizer)
    [ $# -ge 1 ] || usage
    B=$(need_bin "$1") || exit 2
    TOK=$REPO/tests/data/qwen3-tokenizer/tokenizer.json
    CORPUS=$TMPD/tok_corpus.txt
    [ $# -ge 2 ] && CORPUS=$(abspath "$2")
    if [ ! -s "$CORPUS" ]; then  # ~19 MB of prose, code, JSON and UI strings in ~20 scripts (Debian files)
      run corpus python3 "$REPO/scripts/tokenizer_bench_corpus.py" "$CORPUS" 16 || exit 1
    fi
    run "nano-vLLM bench tokenizer" "$B" bench tokenizer --tokenizer "$TOK" --corpus "$CORPUS" --passes 3 --json
    grep -E '^\{' "$LOG" | tail -1 > "$TMPD/tok.json"
    add_json tokenizer nano-vLLM "$TMPD/tok.json"
    run "HF tokenizers" env RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false python3 "$HERE/bench_util.py" \
      hf-tokenizer "$TOK" "$CORPUS" "$TMPD/hf_tok.json"
    add_json hf_tokenizer "HF tokenizers" "$TMPD/hf_tok.json"
    # The committed golden ids against Python tokenizers (made with the Node binding of the same Rust core).
    run "golden ids vs Python tokenizers" python3 scripts/tokenizer_golden_check_python.py
    show 'MB/s|mismatch|golden'
    ;;

  profile-step)
    [ $# -ge 1 ] || usage
    B=$(need_bin "$1") || exit 2
    MAKER=$B
    KIND=${2:-decode}
    # Defaults: ~2 decode steps at batch ~224; `prefill 640 320` is about one 8K-token prefill step.
    SKIP=${3:-35000}
    COUNT=${4:-600}
    # Only kernels inside the runner's NVTX range of that step kind count (the skip too).
    mk q06
    run "ncu $KIND steps" ncu --clock-control none --graph-profiling node --nvtx --nvtx-include "$KIND/" \
      --launch-skip "$SKIP" --launch-count "$COUNT" --metrics gpu__time_duration.sum --csv \
      --log-file "$OUT/$MODE.csv" "$B" bench throughput --backend cuda --model "$MODELS/q06"
    [ -s "$OUT/$MODE.csv" ] && python3 "$HERE/bench_util.py" ncu-step "$OUT/$MODE.csv" | tee -a "$LOG"
    ;;

  profile-kernels)
    [ $# -ge 2 ] || usage
    T=$(test_bin "$1") || exit 2
    REGEX=${3:-.}
    S=smsp__average_warp_latency_issue_stalled
    M=gpu__time_duration.sum,sm__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
    M=$M,sm__warps_active.avg.pct_of_peak_sustained_active,sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active
    M=$M,dram__throughput.avg.pct_of_peak_sustained_elapsed
    for r in barrier long_scoreboard math_pipe_throttle wait short_scoreboard no_instruction branch_resolving \
             dispatch_stall mio_throttle lg_throttle not_selected selected; do M=$M,${S}_$r.ratio; done
    run "ncu $2" ncu --clock-control none --kernel-name "regex:$REGEX" --csv --log-file "$OUT/$MODE.csv" \
      --metrics "$M" "$T" --gtest_also_run_disabled_tests --gtest_filter="$2"
    [ -s "$OUT/$MODE.csv" ] && python3 "$HERE/bench_util.py" ncu-kernels "$OUT/$MODE.csv" | tee -a "$LOG"
    ;;

  *) usage ;;
esac

if [ -s "$JSONL" ]; then
  echo
  python3 "$HERE/bench_util.py" summary "$JSONL" | tee -a "$LOG"
else
  rm -f "$JSONL"
fi
echo "log: $LOG"
[ "$FAILED" -eq 0 ] || { echo "$FAILED command(s) failed"; exit 1; }
