// Reading one HTTP/1.x request with Boost.Beast under HttpLimits: the parser's configuration, the checks
// Beast leaves to its user (how many header fields, transfer codings other than chunked, the HTTP
// version), and the status each parse error earns. Shared by the connection (http_session.cpp) and the
// request-parser fuzz target (tests/fuzz/http_request_fuzz.cpp), so the fuzzer runs exactly these rules.
//
// What Beast itself enforces with this configuration: request line + fields within max_header_bytes
// (error::header_limit); the body within the body limit whatever its framing — Content-Length up front,
// each chunk's size as it is announced (error::body_limit); one Content-Length value (several that differ,
// a negative or non-numeric one: bad_content_length / multiple_content_length); never Content-Length
// together with chunked (bad_content_length / bad_transfer_encoding).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "nanovllm/server/http_limits.h"
#include "nanovllm/server/http_types.h"

namespace nanovllm::server {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Sets the header and body limits of a fresh parser (one per request; Beast parsers are single-use).
void configure(RequestParser& parser, const HttpLimits& limits, size_t max_body_bytes);

// The cap of a connection's read buffer: bytes read but not parsed yet (a header in progress, pipelined
// requests). Bodies pass through it in pieces, so it bounds those bytes too.
size_t read_buffer_limit(const HttpLimits& limits);

struct Refusal {
  int status = 400;
  std::string message;
};

// After the header: what the limits or the framing rules refuse, or nullopt.
std::optional<Refusal> check_header(const RequestParser& parser, const HttpLimits& limits);

// The answer to a read error; nullopt when there is no one to answer (the client left mid-request).
std::optional<Refusal> refusal_for(const boost::beast::error_code& ec, bool header_done, size_t max_body_bytes);

// The path of a request target: origin form ("/v1/models?x" -> "/v1/models") or absolute form
// ("http://host:8000/v1/models" -> "/v1/models", RFC 9112 3.2.2; an empty path is "/").
std::string target_path(std::string_view target);

// The request line and fields as an HttpRequest (without the body).
HttpRequest to_request(const RequestParser& parser);

}  // namespace nanovllm::server
