// Leveled logging to stderr. Level from NANOVLLM_LOG_LEVEL (debug|info|warn|error) or set_log_level().
#pragma once

#include <string>

#include "nanovllm/core/error.h"

namespace nanovllm {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, const std::string& msg);

}  // namespace nanovllm

#define NANOVLLM_LOG(level, ...)                                                            \
  do {                                                                                      \
    if (::nanovllm::LogLevel::level >= ::nanovllm::log_level())                              \
      ::nanovllm::log_message(::nanovllm::LogLevel::level, ::nanovllm::detail::concat(__VA_ARGS__)); \
  } while (0)
#define NANOVLLM_DEBUG(...) NANOVLLM_LOG(kDebug, __VA_ARGS__)
#define NANOVLLM_INFO(...) NANOVLLM_LOG(kInfo, __VA_ARGS__)
#define NANOVLLM_WARN(...) NANOVLLM_LOG(kWarn, __VA_ARGS__)
#define NANOVLLM_ERROR(...) NANOVLLM_LOG(kError, __VA_ARGS__)
