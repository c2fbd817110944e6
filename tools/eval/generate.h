// Many samples at once: the request list of a RULER run or a needle sweep, built on several threads and
// handed over in request order (so a dump streams while later samples are still being built).
#pragma once

#include <functional>
#include <vector>

#include "eval/sample.h"

namespace nanovllm::eval {

// Sample-major order (sample 0 of every context and task, then sample 1, ...), so a stream of them — the
// trainer reads the dump as it is written — mixes tasks and lengths from the start.
std::vector<SampleRequest> ruler_requests(const std::vector<TaskConfig>& tasks, const std::vector<int64_t>& contexts,
                                          int64_t samples);
// Every (depth, context) cell of a needle sweep, `samples` each, depth-major.
std::vector<SampleRequest> needle_requests(const TaskConfig& task, const std::vector<double>& depths,
                                           const std::vector<int64_t>& contexts, int64_t samples);

// Builds every request on `threads` threads (0: the hardware's) and calls `sink` with each sample in
// request order, on the calling thread. A sample whose context is too short is an error (the first is
// rethrown after the workers stop), or, given `on_skip`, left out and passed to it instead.
void generate_samples(const SampleBuilder& builder, const std::vector<SampleRequest>& requests, int threads,
                      const std::function<void(Sample&&)>& sink,
                      const std::function<void(const SampleRequest&)>& on_skip = {});

}  // namespace nanovllm::eval
