// A one-line progress bar on stderr, drawn only when stderr is a terminal (logs and pipes stay clean).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace nanovllm::eval {

class ProgressBar {
 public:
  ProgressBar(std::string label, size_t total);  // enabled when stderr is a TTY
  ~ProgressBar();                                // ends the line if one was drawn

  void update(size_t done);
  bool enabled() const { return enabled_; }

 private:
  std::string label_;
  size_t total_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace nanovllm::eval
