#include "progress.h"

#include <unistd.h>

#include <cstdio>

namespace nanovllm::cli {
namespace {
constexpr std::chrono::milliseconds kRedraw{250};
constexpr double kMinRateSeconds = 0.2;  // a rate over less time is noise: not shown
}  // namespace

ProgressLine::ProgressLine(int64_t total, bool enabled) : total_(total), enabled_(enabled) {}

bool ProgressLine::stderr_is_terminal() { return ::isatty(STDERR_FILENO) != 0; }

void ProgressLine::add(int64_t tokens) {
  done_ += tokens;
  if (!enabled_) return;
  const Clock::time_point now = Clock::now();
  if (drawn_ && now - last_draw_ < kRedraw) return;
  last_draw_ = now;
  const double s = std::chrono::duration<double>(now - start_).count();
  // \r and "erase to end of line": the line is rewritten in place.
  std::fprintf(stderr, "\r\033[Kgenerating: %lld/%lld tokens", static_cast<long long>(done_),
               static_cast<long long>(total_));
  if (s >= kMinRateSeconds) std::fprintf(stderr, " (%.1f tok/s)", static_cast<double>(done_) / s);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::finish() {
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace nanovllm::cli
