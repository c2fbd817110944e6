// Benchmark helpers for the CUDA linear / gemv benches: graph replays of back-to-back launches rotating over
// enough weight copies (>= 512 MiB in all) that L2 holds none of them; per-launch time.
#pragma once

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "cuda_test_util.h"

namespace nanovllm::cuda_test {

// Per-launch us of a graph of `launches` calls of launch_i(i, stream) (median of 15 replays).
template <typename F>
inline double graph_us_per_launch(int launches, F&& launch_i) {
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < launches; ++i) launch_i(i, s);  // warm-up: workspaces, algorithm caches
  CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) launch_i(i, s);
  CUDA_CHECK(cudaStreamEndCapture(s, &g));
  CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  CUDA_CHECK(cudaGraphLaunch(ge, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  const std::vector<float> ms = graph_replay_ms(ge, s, 15);
  CUDA_CHECK(cudaGraphExecDestroy(ge));
  CUDA_CHECK(cudaGraphDestroy(g));
  CUDA_CHECK(cudaStreamDestroy(s));
  return ms[ms.size() / 2] * 1e3 / launches;
}

struct Shape3 {
  const char* name;
  int64_t N, K;
  DType out;
};

// One random [N, K] bf16 weight copied until the copies exceed `total` bytes (at least 2), so launches
// rotating over them find none in L2. Contents do not matter for timing; non-zero matters.
inline std::vector<std::unique_ptr<DeviceTensor>> weight_copies(const Shape3& sh, size_t total, std::mt19937& rng) {
  const size_t wbytes = static_cast<size_t>(sh.N * sh.K * 2);
  const size_t copies = std::max<size_t>(2, total / wbytes + 1);
  const auto w = random_bf16(static_cast<size_t>(sh.N * sh.K), rng, -0.5f, 0.5f);
  std::vector<std::unique_ptr<DeviceTensor>> ws;
  for (size_t c = 0; c < copies; ++c) ws.push_back(std::make_unique<DeviceTensor>(DType::kBF16, Shape{sh.N, sh.K}, w.bits));
  return ws;
}

}  // namespace nanovllm::cuda_test
