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
