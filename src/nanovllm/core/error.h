// Errors: NANOVLLM_CHECK throws nanovllm::Error (always on, release builds too) for anything a user can
// cause — bad configs, bad weights, bad requests. NANOVLLM_ASSERT aborts: a failed one is a bug.
// An Error keeps its message and the source location apart: what() is "file:line: message" (logs, tests),
// while front ends show message() to users and the location only when asked (the CLI's --debug).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace nanovllm {

class Error : public std::runtime_error {
 public:
  // No location: what() == message().
  explicit Error(const std::string& message) : std::runtime_error(message), message_(message) {}
  // location: "file:line" (may be empty); what() is "location: message".
  Error(const std::string& message, const std::string& location)
      : std::runtime_error(location.empty() ? message : location + ": " + message),
        message_(message),
        location_(location) {}

  const std::string& message() const { return message_; }
  const std::string& location() const { return location_; }
  // The same error with `prefix` in front of its message (context added by a caller), same location.
  Error prefixed(const std::string& prefix) const { return Error(prefix + message_, location_); }

 private:
  std::string message_;
  std::string location_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);
[[noreturn]] void abort_invariant(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace nanovllm

// NANOVLLM_CHECK(cond, "message parts", value, ...) — throws nanovllm::Error("file:line: message").
#define NANOVLLM_CHECK(cond, ...)                                                         \
  do {                                                                                    \
    if (!(cond)) [[unlikely]]                                                             \
      ::nanovllm::detail::throw_error(__FILE__, __LINE__,                                 \
                                      ::nanovllm::detail::concat(__VA_ARGS__));           \
  } while (0)

#define NANOVLLM_FAIL(...) \
  ::nanovllm::detail::throw_error(__FILE__, __LINE__, ::nanovllm::detail::concat(__VA_ARGS__))

// Internal invariant: logs and aborts (never thrown across the API).
#define NANOVLLM_ASSERT(cond, ...)                                                        \
  do {                                                                                    \
    if (!(cond)) [[unlikely]]                                                             \
      ::nanovllm::detail::abort_invariant(__FILE__, __LINE__, #cond,                      \
                                          ::nanovllm::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
