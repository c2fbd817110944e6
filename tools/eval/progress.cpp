#include "eval/progress.h"

#include <cstdio>
#include <unistd.h>

namespace nanovllm::eval {

ProgressBar::ProgressBar(std::string label, size_t total)
    : label_(std::move(label)),
      total_(total),
      enabled_(::isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fputc('\n', stderr);
}

void ProgressBar::update(size_t done) {
  if (!enabled_ || total_ == 0) return;
  const auto now = std::chrono::steady_clock::now();
  // At most ~10 redraws a second, but always the last one.
  if (done < total_ && drawn_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / total_);
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double eta = done > 0 ? elapsed * static_cast<double>(total_ - done) / static_cast<double>(done) : 0.0;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(stderr, "\r%s [%s] %zu/%zu  %.0fs elapsed, ~%.0fs left ", label_.c_str(), bar.c_str(), done, total_,
               elapsed, eta);
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace nanovllm::eval
