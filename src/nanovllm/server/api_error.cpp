#include "nanovllm/server/api_error.h"

#include <cctype>

namespace nanovllm::server {

nlohmann::json ApiError::to_json() const {
  auto opt = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
  return {{"error", {{"message", message}, {"type", type}, {"param", opt(param)}, {"code", opt(code)}}}};
}

ApiError ApiError::bad_request(std::string message, std::string param) {
  return {400, std::move(message), "invalid_request_error", std::move(param), ""};
}
ApiError ApiError::unauthorized() {
  return {401, "invalid API key: send it as 'Authorization: Bearer <key>'", "authentication_error", "",
          "invalid_api_key"};
}
ApiError ApiError::not_found(std::string message, std::string code) {
  return {404, std::move(message), "not_found_error", "", std::move(code)};
}
ApiError ApiError::payload_too_large(size_t limit) {
  return {413, "request body exceeds the limit of " + std::to_string(limit) + " bytes", "invalid_request_error",
          "", "request_too_large"};
}
ApiError ApiError::too_many_requests(int limit) {
  return {429,
          "too many sequences in flight (limit " + std::to_string(limit) +
              ", a request taking one per prompt and choice); retry later",
          "rate_limit_error", "", "rate_limit_exceeded"};
}
ApiError ApiError::internal(std::string message) { return {500, std::move(message), "internal_error", "", ""}; }
ApiError ApiError::unavailable(std::string message) {
  return {503, std::move(message), "service_unavailable", "", ""};
}

ApiError ApiError::from_status(int status, std::string message) {
  ApiError e = [status] {
    switch (status) {
      case 400: return bad_request("malformed HTTP request");
      case 404: return not_found("no such endpoint");
      case 405: return ApiError{405, "method not allowed", "invalid_request_error", "", ""};
      case 408: return ApiError{408, "the request did not arrive in time", "invalid_request_error", "", "timeout"};
      case 413: return ApiError{413, "request body too large", "invalid_request_error", "", "request_too_large"};
      case 414: return ApiError{414, "request URI too long", "invalid_request_error", "", ""};
      case 431: return ApiError{431, "request header fields too large", "invalid_request_error", "", ""};
      case 501: return ApiError{501, "not implemented", "invalid_request_error", "", ""};
      case 505: return ApiError{505, "HTTP version not supported", "invalid_request_error", "", ""};
      default: break;
    }
    if (status >= 500) return ApiError{status, "internal server error", "internal_error", "", ""};
    return ApiError{status, "request failed", "invalid_request_error", "", ""};
  }();
  if (!message.empty()) e.message = std::move(message);
  return e;
}

std::string user_message(const std::exception& e) {
  std::string_view m = e.what();
  // "path/to/file.cpp:123: message" -> "message"
  const size_t colon = m.find(": ");
  if (colon != std::string_view::npos && colon > 0) {
    size_t digits = colon;
    while (digits > 0 && std::isdigit(static_cast<unsigned char>(m[digits - 1]))) --digits;
    if (digits < colon && digits > 1 && m[digits - 1] == ':' && m.substr(0, digits).find(' ') == std::string_view::npos)
      return std::string(m.substr(colon + 2));
  }
  return std::string(m);
}

}  // namespace nanovllm::server
