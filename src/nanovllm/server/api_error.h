// ApiError: an OpenAI-style error response, {"error": {"message", "type", "param", "code"}} with its HTTP
// status. Request parsing throws ApiException; the HTTP handlers catch everything and answer with JSON.
#pragma once

#include <exception>
#include <string>

#include <nlohmann/json.hpp>

#include "nanovllm/server/http_types.h"

namespace nanovllm::server {

struct ApiError {
  int status = 500;
  std::string message;
  std::string type;   // invalid_request_error, authentication_error, not_found_error, ...
  std::string param;  // the offending request field, or empty
  std::string code;   // machine-readable, or empty

  nlohmann::json to_json() const;
  std::string body() const {  // invalid UTF-8 from the request (quoted in a message) becomes U+FFFD
    return to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  HttpResponse response() const { return {status, "application/json", body(), {}}; }

  static ApiError bad_request(std::string message, std::string param = "");  // 400
  static ApiError unauthorized();                                             // 401
  static ApiError not_found(std::string message, std::string code = "");     // 404
  static ApiError payload_too_large(size_t limit);                           // 413
  static ApiError too_many_requests(int limit);                              // 429
  static ApiError internal(std::string message);                             // 500
  static ApiError unavailable(std::string message);                          // 503
  // Any other status (from the HTTP layer: 405, 408, 431, ...); `message` replaces the generic one.
  static ApiError from_status(int status, std::string message = "");
};

class ApiException : public std::exception {
 public:
  explicit ApiException(ApiError error) : error_(std::move(error)) {}
  const ApiError& error() const { return error_; }
  const char* what() const noexcept override { return error_.message.c_str(); }

 private:
  ApiError error_;
};

// nanovllm::Error messages start with "file:line: "; clients get the part after it.
std::string user_message(const std::exception& e);

}  // namespace nanovllm::server
