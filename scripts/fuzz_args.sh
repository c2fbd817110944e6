# Sourced by scripts/fuzz_*.sh with their arguments: [seconds=60] (build, then run), --build (build only), or
# --run SECONDS (run what --build built; .ci/run builds in the background and runs later). Sets mode and secs.
mode=all
secs=60
case "${1:-}" in
  --build) mode=build ;;
  --run) mode=run; secs="${2:-60}" ;;
  "") ;;
  *) secs=$1 ;;
esac
