// Errors: NANOVLLM_CHECK throws nanovllm::Error (always on, release builds too) for anything a user can
// cause — bad configs, bad weights, bad requests. NANOVLLM_ASSERT aborts: a failed one is a bug.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace nanovllm {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
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
