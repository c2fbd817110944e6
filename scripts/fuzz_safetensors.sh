#!/usr/bin/env bash
# Short libFuzzer run of tests/fuzz/safetensors_fuzz.cpp (clang, -fsanitize=fuzzer,address,undefined):
# arbitrary bytes as a .safetensors file into the header parser every checkpoint load uses.
#   scripts/fuzz_safetensors.sh [seconds=60]    build, then run
#   scripts/fuzz_safetensors.sh --build         build only (.ci/run builds in the background, runs later)
#   scripts/fuzz_safetensors.sh --run SECONDS   run what --build built
# Builds into build/fuzz-safetensors; seeds are small valid and broken files; crashes land in that dir and
# fail the script.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/scripts/fuzz_args.sh"
out="$root/build/fuzz-safetensors"
mkdir -p "$out/corpus"
if [ $mode != run ]; then
  command -v clang++ >/dev/null || { echo "clang++ not found (scripts/install_deps.sh --fuzz)"; exit 1; }
  cd "$root/src/nanovllm"
  srcs=(model/safetensors.cpp core/tensor.cpp core/error.cpp)
  clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/src" "${srcs[@]}" "$root/tests/fuzz/safetensors_fuzz.cpp" -lpthread -o "$out/safetensors_fuzz"
fi
[ $mode != build ] || exit 0
# Seeds in the fuzzer's "header\0data" form (first byte odd): valid files, and the usual ways files break.
python3 - "$out/corpus" <<'PY'
import json, os, sys
d = sys.argv[1]
def seed(name, header, data=b""):
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    open(os.path.join(d, name), "wb").write(b"\x01" + h + b"\x00" + data)
seed("bf16_two", {"a": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
                  "b": {"dtype": "F32", "shape": [2], "data_offsets": [12, 20]},
                  "__metadata__": {"format": "pt"}}, bytes(range(20)))
seed("f16_scalar", {"s": {"dtype": "F16", "shape": [], "data_offsets": [0, 2]}}, b"\x00\x3c")
seed("empty_tensor", {"e": {"dtype": "F32", "shape": [0, 4], "data_offsets": [0, 0]}})
seed("overlap", {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                 "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12))
seed("past_end", {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8))
seed("huge_shape", {"a": {"dtype": "F32", "shape": [1 << 40, 1 << 40], "data_offsets": [0, 4]}}, bytes(4))
seed("bad_dtype", {"a": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}}, bytes(8))
seed("not_json", b"{\"a\": ")
open(os.path.join(d, "raw_bad_length"), "wb").write(b"\x00" + (10**12).to_bytes(8, "little") + b"{}")
PY
cd "$out"
./safetensors_fuzz -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=2048 corpus 2>&1 | tail -n 25
