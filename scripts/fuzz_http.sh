#!/usr/bin/env bash
# Short libFuzzer run of tests/fuzz/http_request_fuzz.cpp (the server's request reading: Beast parser +
# limits + header checks, JSON depth, parameter table), clang with -fsanitize=fuzzer,address,undefined.
#   scripts/fuzz_http.sh [seconds=60]    build, then run
#   scripts/fuzz_http.sh --build         build only (.ci/run builds in the background, runs later)
#   scripts/fuzz_http.sh --run SECONDS   run what --build built
# Builds into build/fuzz-http; seeds are a few well-formed and hostile requests; crashes land in that dir
# (and fail the script).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/scripts/fuzz_args.sh"
out="$root/build/fuzz-http"
mkdir -p "$out/corpus"
if [ $mode != run ]; then
  command -v clang++ >/dev/null || { echo "clang++ not found (scripts/install_deps.sh --fuzz)"; exit 1; }
  cd "$root/src/nanovllm/server"
  clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/src" -DBOOST_ASIO_NO_DEPRECATED -DBOOST_ENABLE_ASSERT_DEBUG_HANDLER \
    http_request_reader.cpp json_depth.cpp parameters.cpp api_error.cpp boost_assert.cpp \
    "$root/tests/fuzz/http_request_fuzz.cpp" \
    -o "$out/http_request_fuzz"
fi
[ $mode != build ] || exit 0
# Seeds: the first byte is the read size; then one or more requests.
seed() { printf '%b' "$2" > "$out/corpus/$1"; }
seed get '\x07GET /health HTTP/1.1\r\nHost: x\r\n\r\n'
seed post '\x10POST /v1/completions HTTP/1.1\r\nContent-Length: 31\r\n\r\n{"prompt": "a", "max_tokens": 2}'
seed chunked '\x05POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"n":\r\n3;x=y\r\n 1}\r\n0\r\nTrailer: t\r\n\r\n'
seed pipelined '\x3fGET /a HTTP/1.1\r\n\r\nPOST /b HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}GET /c HTTP/1.1\r\n\r\n'
seed conflict '\x01POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n{}'
# One byte per read through a last chunk: Beast 1.81's false assertion (see boost_assert.cpp).
seed trickled_last_chunk '\x00POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'
# A key named "": refused like any unknown key, naming it (an empty param).
seed empty_key '\x10POST /v1/completions HTTP/1.1\r\nContent-Length: 30\r\n\r\n{"": 0, "prompt": "a", "n": 1}'
seed nested '\x20POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 60\r\n\r\n{"messages": [[[[[[[[[[[[]]]]]]]]]]]], "response_format": {"type": 1}}'
cd "$out"
set +e
./http_request_fuzz -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 corpus > fuzz.log 2>&1
rc=$?
set -e
tail -n 15 fuzz.log
exit $rc
