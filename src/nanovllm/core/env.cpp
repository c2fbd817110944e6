#include "nanovllm/core/env.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace nanovllm {
namespace {

const char* value_of(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

LogLevel parse_log_level(const char* v) {
  if (v == nullptr) return LogLevel::kWarn;
  if (!std::strcmp(v, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(v, "info")) return LogLevel::kInfo;
  if (!std::strcmp(v, "error")) return LogLevel::kError;
  if (!std::strcmp(v, "off")) return LogLevel::kOff;
  return LogLevel::kWarn;
}

int parse_threads(const char* v) {
  if (v == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return end != v && *end == '\0' && n >= 1 ? static_cast<int>(std::min<long>(n, 1024)) : 0;
}

Environment read_environment() {
  Environment e;
  e.log_level = parse_log_level(value_of("NANOVLLM_LOG_LEVEL"));
  e.num_threads = parse_threads(value_of("NANOVLLM_NUM_THREADS"));
  const char* pdl = value_of("NANOVLLM_PDL");
  e.pdl = pdl == nullptr || std::strcmp(pdl, "0") != 0;
  if (const char* v = value_of("NANOVLLM_PDL_EARLY_NORM")) e.pdl_early_norm = std::strcmp(v, "0") == 0 ? 0 : 1;
  const char* tune = value_of("NANOVLLM_TUNE_LINEAR");
  e.tune_linear = tune == nullptr || std::strcmp(tune, "0") != 0;
  return e;
}

}  // namespace

const Environment& environment() {
  static const Environment env = read_environment();
  return env;
}

}  // namespace nanovllm
