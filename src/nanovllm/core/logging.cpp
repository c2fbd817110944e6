#include "nanovllm/core/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace nanovllm {
namespace {

LogLevel level_from_env() {
  const char* env = std::getenv("NANOVLLM_LOG_LEVEL");
  if (!env) return LogLevel::kWarn;
  if (!std::strcmp(env, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(env, "info")) return LogLevel::kInfo;
  if (!std::strcmp(env, "error")) return LogLevel::kError;
  if (!std::strcmp(env, "off")) return LogLevel::kOff;
  return LogLevel::kWarn;
}

std::atomic<LogLevel>& current_level() {
  static std::atomic<LogLevel> level{level_from_env()};
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
