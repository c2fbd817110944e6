#include "nanovllm/server/http_request_reader.h"

#include <algorithm>
#include <cctype>
#include <iterator>

namespace nanovllm::server {
namespace http = boost::beast::http;

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

void configure(RequestParser& parser, const HttpLimits& limits, size_t max_body_bytes) {
  parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  parser.body_limit(max_body_bytes);
}

size_t read_buffer_limit(const HttpLimits& limits) { return limits.max_header_bytes + (64u << 10); }

std::optional<Refusal> check_header(const RequestParser& parser, const HttpLimits& limits) {
  const auto& req = parser.get();
  if (req.version() != 10 && req.version() != 11) return Refusal{505, "only HTTP/1.0 and HTTP/1.1 are served"};
  const auto fields = std::distance(req.begin(), req.end());
  if (fields > limits.max_header_fields)
    return Refusal{431, "too many header fields (" + std::to_string(fields) + ", the limit is " +
                            std::to_string(limits.max_header_fields) + ")"};
  // Beast treats a body as chunked when chunked is the last coding and reads no body for other codings;
  // the server decodes none of them, so anything but exactly "chunked" is refused rather than misread.
  const auto te = req.find(http::field::transfer_encoding);
  if (te != req.end()) {
    const std::string_view v(te->value().data(), te->value().size());
    if (lower(trim(v)) != "chunked" || !parser.chunked())
      return Refusal{501, "unsupported Transfer-Encoding '" + std::string(v) + "' (only chunked)"};
  }
  return std::nullopt;
}

std::optional<Refusal> refusal_for(const boost::beast::error_code& ec, bool header_done, size_t max_body_bytes) {
  if (ec == http::error::header_limit) return Refusal{431, "the request line and header fields are too large"};
  if (ec == http::error::body_limit)
    return Refusal{413, "request body exceeds the limit of " + std::to_string(max_body_bytes) + " bytes"};
  if (ec == http::error::buffer_overflow)
    return header_done ? Refusal{400, "malformed chunked body (a chunk header is too long)"}
                       : Refusal{431, "the request line and header fields are too large"};
  // The other parser errors: a malformed request. end_of_stream and partial_message mean the client left.
  if (ec.category() == http::make_error_code(http::error::bad_method).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message && ec != http::error::need_more)
    return Refusal{400, "malformed HTTP request: " + ec.message()};
  return std::nullopt;  // a socket error or a close: no one to answer
}

std::string target_path(std::string_view target) {
  // RFC 9112 3.2.2: a server accepts the absolute form, "http://host:port/path?query", as well.
  const size_t scheme_end = target.find("://");
  if (scheme_end != std::string_view::npos) {
    const std::string scheme = lower(target.substr(0, scheme_end));
    if (scheme == "http" || scheme == "https") {
      const std::string_view rest = target.substr(scheme_end + 3);
      const size_t slash = rest.find_first_of("/?#");
      target = slash == std::string_view::npos || rest[slash] != '/' ? std::string_view("/") : rest.substr(slash);
    }
  }
  return std::string(target.substr(0, target.find_first_of("?#")));
}

HttpRequest to_request(const RequestParser& parser) {
  const auto& req = parser.get();
  HttpRequest r;
  r.method = std::string(req.method_string().data(), req.method_string().size());
  r.path = target_path(std::string_view(req.target().data(), req.target().size()));
  r.version = req.version();
  for (const auto& f : req)
    r.headers.emplace_back(lower(std::string_view(f.name_string().data(), f.name_string().size())),
                           std::string(f.value().data(), f.value().size()));
  r.has_body = !parser.is_done();
  return r;
}

}  // namespace nanovllm::server
