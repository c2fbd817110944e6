// libFuzzer target: the bytes a client sends, through the server's request reading exactly as a connection
// does it (http_request_reader: Beast's parser with the server's limits, then the header checks), in pieces
// of a fuzzer-chosen size, several pipelined requests per input; each body then goes through the JSON shape
// check (depth, keys per object), the JSON parser and the parameter table.
// Invariants: no crash or sanitizer report; an accepted header has at most max_header_fields fields; an
// accepted body is within the body limit, whatever its framing; JSON within the depth limit can be walked.
// Build and run: scripts/fuzz_http.sh [seconds]
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <boost/beast/core/flat_buffer.hpp>

#include "nanovllm/server/api_error.h"
#include "nanovllm/server/http_request_reader.h"
#include "nanovllm/server/json_depth.h"
#include "nanovllm/server/parameters.h"

namespace beast = boost::beast;
namespace http = beast::http;
using namespace nanovllm::server;

namespace {

constexpr size_t kMaxBody = 4096;

HttpLimits limits() {
  HttpLimits l;
  l.max_header_bytes = 2048;  // small, so that inputs of a few KB reach every limit
  l.max_header_fields = 16;
  return l;
}

void check_body(const std::string& body, bool chat) {
  if (body.size() > kMaxBody) std::abort();
  const JsonShape shape = json_shape(body);
  if (shape.depth > kMaxJsonDepth || shape.widest > kMaxJsonObjectKeys) return;  // the server answers 400 here
  const auto j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return;
  (void)j.dump();  // recursive: safe within the depth limit
  try {
    check_parameters(j, chat ? Endpoint::kChat : Endpoint::kCompletions);
  } catch (const ApiException& e) {
    // Refusals name the parameter: one of the body's keys (which may be "", a name JSON allows).
    if (e.error().status != 400 || !j.contains(e.error().param)) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t step = data[0] % 64 + 1;  // bytes per read, as a trickling client would send them
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const HttpLimits lim = limits();
  beast::flat_buffer buffer(read_buffer_limit(lim));
  for (int request = 0; request < 8; ++request) {
    RequestParser parser;
    configure(parser, lim, kMaxBody);
    bool header_checked = false;
    while (!parser.is_done()) {
      beast::error_code ec;
      const size_t used = buffer.size() ? parser.put(buffer.data(), ec) : 0;
      buffer.consume(used);
      if (ec && ec != http::error::need_more) {
        (void)refusal_for(ec, parser.is_header_done(), kMaxBody);
        return 0;  // the connection answers and closes
      }
      if (parser.is_header_done() && !header_checked) {
        header_checked = true;
        if (check_header(parser, lim)) return 0;
        const HttpRequest r = to_request(parser);
        if (r.headers.size() > static_cast<size_t>(lim.max_header_fields)) std::abort();
        continue;
      }
      if (used > 0 && !ec) continue;
      // More bytes, as the socket would deliver them.
      const size_t room = buffer.max_size() - buffer.size();
      const size_t n = std::min({step, in.size(), room});
      if (n == 0) return 0;  // the client stopped (or filled the buffer: 431 / 400)
      std::memcpy(buffer.prepare(n).data(), in.data(), n);
      buffer.commit(n);
      in.remove_prefix(n);
    }
    check_body(parser.get().body(), parser.get().target().find("chat") != beast::string_view::npos);
  }
  return 0;
}
