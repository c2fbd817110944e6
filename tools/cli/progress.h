// A one-line progress report for generations, on stderr and only when stderr is a terminal (a pipe or a
// file gets nothing): "generating: 1234/40955 tokens (31.2 tok/s)", drawn at the first token and then
// rewritten in place a few times a second, and erased when the work ends (so the results printed after
// it start on a clean line, and a short run leaves nothing behind).
#pragma once

#include <chrono>
#include <cstdint>

namespace nanovllm::cli {

class ProgressLine {
 public:
  // `total`: the most tokens the work can produce. `enabled`: whether to draw at all (stderr is a TTY).
  ProgressLine(int64_t total, bool enabled);
  ~ProgressLine() { finish(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  static bool stderr_is_terminal();

  void add(int64_t tokens);  // `tokens` more were generated
  void finish();             // erases the line (when one was drawn)

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_;
  bool enabled_;
  int64_t done_ = 0;
  bool drawn_ = false;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_draw_{};
};

}  // namespace nanovllm::cli
