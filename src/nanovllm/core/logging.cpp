#include "nanovllm/core/logging.h"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "nanovllm/core/env.h"

namespace nanovllm {
namespace {

std::atomic<LogLevel>& current_level() {
  static std::atomic<LogLevel> level{environment().log_level};
  return level;
}

}  // namespace

void set_log_level(LogLevel level) { current_level().store(level); }
LogLevel log_level() { return current_level().load(); }

void log_message(LogLevel level, const std::string& msg) {
  static std::mutex mu;
  static const char* const kNames[] = {"debug", "info", "warn", "error"};
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[nanovllm %s] %s\n", kNames[static_cast<int>(level)], msg.c_str());
}

}  // namespace nanovllm
