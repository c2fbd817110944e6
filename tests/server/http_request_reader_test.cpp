// The server's request reading (http_request_reader: Beast's parser with the server's limits) fed the way a
// trickling client's bytes arrive, one read at a time. A last chunk "0\r\n" resumed with one more byte trips
// a false assertion in Beast 1.81 (boostorg/beast PR 2861); builds without NDEBUG route it through
// boost_assert.cpp, which must let the parse go on instead of aborting the server.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include <boost/beast/core/flat_buffer.hpp>

#include "nanovllm/server/http_request_reader.h"

namespace nanovllm::testing {
namespace {

namespace http = boost::beast::http;

// Parses `bytes` delivered `step` bytes per read, as a connection does; returns the body, or the error.
std::string read_trickled(const std::string& bytes, size_t step, std::string* error) {
  server::HttpLimits limits;
  server::RequestParser parser;
  server::configure(parser, limits, 1u << 20);
  boost::beast::flat_buffer buffer(server::read_buffer_limit(limits));
  size_t pos = 0;
  while (!parser.is_done()) {
    boost::beast::error_code ec;
    const size_t used = buffer.size() ? parser.put(buffer.data(), ec) : 0;
    buffer.consume(used);
    if (ec && ec != http::error::need_more) {
      *error = ec.message();
      return {};
    }
    if (used > 0 && !ec) continue;
    const size_t n = std::min(step, bytes.size() - pos);
    if (n == 0) {
      *error = "incomplete";
      return {};
    }
    std::memcpy(buffer.prepare(n).data(), bytes.data() + pos, n);
    buffer.commit(n);
    pos += n;
  }
  return parser.get().body();
}

TEST(HttpRequestReader, ChunkedBodiesArriveByteByByte) {
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  struct Case {
    const char* name;
    std::string chunks;
    std::string body;
  };
  const Case cases[] = {
      {"only the last chunk", "0\r\n\r\n", ""},
      {"a trailer after the last chunk", "0\r\nX-T: 1\r\n\r\n", ""},
      {"data, then the last chunk", "2\r\n{}\r\n0\r\n\r\n", "{}"},
      {"an extension on the last chunk", "5\r\nhello\r\n0;x=y\r\n\r\n", "hello"},
  };
  for (const Case& c : cases) {
    for (size_t step : {1, 2, 3, 64}) {
      SCOPED_TRACE(std::string(c.name) + ", " + std::to_string(step) + " bytes per read");
      std::string error;
      EXPECT_EQ(read_trickled(head + c.chunks, step, &error), c.body);
      EXPECT_EQ(error, "");
    }
  }
}

}  // namespace
}  // namespace nanovllm::testing
