#!/usr/bin/env bash
# Short libFuzzer run of tests/fuzz/tokenizer_fuzz.cpp (clang, -fsanitize=fuzzer,address,undefined).
#   scripts/fuzz_tokenizer.sh [seconds=60]    build, then run
#   scripts/fuzz_tokenizer.sh --build         build only (.ci/run builds in the background, runs later)
#   scripts/fuzz_tokenizer.sh --run SECONDS   run what --build built
# Builds into build/fuzz-tokenizer; seeds from the golden corpus texts; crashes land in that dir.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/scripts/fuzz_args.sh"
out="$root/build/fuzz-tokenizer"
mkdir -p "$out/corpus"
if [ $mode != run ]; then
  command -v clang++ >/dev/null || { echo "clang++ not found (apt-get install -y clang)"; exit 1; }
  cd "$root/src/nanovllm/tokenizer"
  srcs=(added_tokens.cpp bpe.cpp byte_level.cpp incremental_detokenizer.cpp normalizer.cpp regex_split.cpp
        token_index.cpp tokenizer.cpp tokenizer_json.cpp utf8.cpp ../core/env.cpp ../core/error.cpp ../core/logging.cpp)
  clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/src" -DPCRE2_STATIC -DUTF8PROC_STATIC \
    -DNANOVLLM_FUZZ_TOKENIZER_DIR="\"$root/tests/data/qwen3-tokenizer\"" \
    "${srcs[@]}" "$root/tests/fuzz/tokenizer_fuzz.cpp" \
    /usr/lib/x86_64-linux-gnu/libpcre2-8.a /usr/lib/x86_64-linux-gnu/libutf8proc.a -lpthread \
    -o "$out/tokenizer_fuzz"
fi
[ $mode != build ] || exit 0
# Seeds: every golden text, one file each.
python3 - "$root/tests/data/tokenizer/qwen3_golden.json" "$out/corpus" <<'PY'
import json, sys, os
g = json.load(open(sys.argv[1]))
for i, c in enumerate(g["cases"]):
    open(os.path.join(sys.argv[2], f"seed_{i}"), "wb").write(c["text"].encode("utf-8"))
PY
cd "$out"
./tokenizer_fuzz -max_total_time="$secs" -max_len=4096 -timeout=10 -rss_limit_mb=4096 corpus 2>&1 | tail -n 25
