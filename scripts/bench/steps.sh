# Sourced by the GPU-machine scripts of scripts/bench (fp8_device.sh, fp8_kv_check.sh, moe_device.sh) after they set
# OUT and BUILD. Each step's output goes to $OUT/NAME.log; a failed step sets FAILED=1 and the script goes on (it
# exits with $FAILED at the end).
FAILED=0
run() {  # run NAME CMD...: log to $OUT/NAME.log, print its last ${STEP_TAIL:-25} lines, note a failure
  local name=$1; shift
  echo "== $name: $*"
  local t0=$SECONDS
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n "${STEP_TAIL:-25}" "$OUT/$name.log"
  echo "== $name: exit $rc, $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || FAILED=1
}
make_model() {  # make_model DIR PRESET [ARGS...]: $NV make-test-model into DIR (seed 1) unless DIR holds a model
  local dir=$1 preset=$2; shift 2
  [ -f "$dir/config.json" ] || run "make_$(basename "$dir")" "$NV" make-test-model --out "$dir" --preset "$preset" \
    --seed 1 "$@"
}
# test_cuda and nanovllm in $BUILD: configured (preset cuda, sm_90a) and built when one the script needs is missing
# (NEEDS: those paths under $BUILD; default both).
missing=0
for bin in ${NEEDS:-tests/test_cuda tools/nanovllm}; do [ -x "$BUILD/$bin" ] || missing=1; done
if [ $missing -eq 1 ]; then
  run build bash -c "cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES=90a -B '$BUILD' && \
                     cmake --build '$BUILD' --target test_cuda nanovllm -j\$(nproc)"
fi
