#include "eval/generate.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "nanovllm/core/error.h"

namespace nanovllm::eval {

std::vector<SampleRequest> ruler_requests(const std::vector<TaskConfig>& tasks, const std::vector<int64_t>& contexts,
                                          int64_t samples) {
  std::vector<SampleRequest> out;
  for (int64_t i = 0; i < samples; ++i)
    for (int64_t c : contexts)
      for (const TaskConfig& t : tasks) out.push_back({&t, c, i, std::nullopt});
  return out;
}

std::vector<SampleRequest> needle_requests(const TaskConfig& task, const std::vector<double>& depths,
                                           const std::vector<int64_t>& contexts, int64_t samples) {
  std::vector<SampleRequest> out;
  for (double d : depths)
    for (int64_t c : contexts)
      for (int64_t i = 0; i < samples; ++i) out.push_back({&task, c, i, d});
  return out;
}

void generate_samples(const SampleBuilder& builder, const std::vector<SampleRequest>& requests, int threads,
                      const std::function<void(Sample&&)>& sink,
                      const std::function<void(const SampleRequest&)>& on_skip) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Chunks of a few samples per thread: built in parallel, then handed over in order.
  const size_t chunk = static_cast<size_t>(threads) * 8;
  std::vector<std::optional<Sample>> built;
  for (size_t begin = 0; begin < requests.size(); begin += chunk) {
    const size_t end = std::min(requests.size(), begin + chunk);
    built.assign(end - begin, std::nullopt);
    std::atomic<size_t> next{begin};
    std::exception_ptr error;
    std::mutex error_mu;
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < end;) {
        try {
          built[i - begin] = on_skip ? builder.try_build(requests[i]) : builder.build(requests[i]);
        } catch (...) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (!error) error = std::current_exception();
          next.store(end);
        }
      }
    };
    const int n = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), end - begin));
    std::vector<std::thread> pool;
    for (int t = 1; t < n; ++t) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    if (error) std::rethrow_exception(error);
    for (size_t i = begin; i < end; ++i) {
      if (built[i - begin]) sink(std::move(*built[i - begin]));
      else on_skip(requests[i]);
    }
  }
}

}  // namespace nanovllm::eval
