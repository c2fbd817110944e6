#include "nanovllm/tokenizer/bench.h"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <vector>

namespace nanovllm::tokenizer {

TokenizerBenchResult bench_tokenizer(const Tokenizer& tokenizer, const std::string& corpus, int passes,
                                     size_t chunk_bytes) {
  std::vector<std::string_view> chunks;
  const std::string_view text(corpus);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = std::min(text.size(), pos + chunk_bytes);
    if (end < text.size()) {
      const size_t nl = text.find('\n', end);
      end = nl == std::string_view::npos ? text.size() : nl + 1;
    }
    chunks.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  TokenizerBenchResult r;
  r.bytes = static_cast<int64_t>(corpus.size());
  r.chunks = static_cast<int64_t>(chunks.size());
  r.passes = std::max(1, passes);
  const auto w0 = std::chrono::steady_clock::now();
  for (std::string_view c : chunks) r.tokens += static_cast<int64_t>(tokenizer.encode(c).size());  // warm-up
  const double cold = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  r.cold_mb_per_s = cold > 0 ? static_cast<double>(r.bytes) / 1e6 / cold : 0;
  double best = 1e30;
  for (int p = 0; p < r.passes; ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t n = 0;
    for (std::string_view c : chunks) n += static_cast<int64_t>(tokenizer.encode(c).size());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    r.tokens = n;
  }
  r.seconds = best;
  r.mb_per_s = best > 0 ? static_cast<double>(r.bytes) / 1e6 / best : 0;
  r.tokens_per_s = best > 0 ? static_cast<double>(r.tokens) / best : 0;
  return r;
}

}  // namespace nanovllm::tokenizer
