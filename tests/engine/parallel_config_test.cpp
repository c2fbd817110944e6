// ParallelConfig: tensor_parallel_size validates itself; EngineConfig accepts N > 1 on both backends (the
// GPU count is checked when the CUDA runner starts), with CPU offload on the CPU backend only, issue #34.
#include <gtest/gtest.h>

#include <string>

#include "nanovllm/core/error.h"
#include "nanovllm/engine/config.h"

using namespace nanovllm;

namespace {

std::string error_of(const EngineConfig& c) {
  try {
    c.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

EngineConfig config_with_tp(int64_t n) {
  EngineConfig c;
  c.model.max_model_len = 64;
  c.parallel.tensor_parallel_size = n;
  return c;
}

}  // namespace

TEST(ParallelConfig, DefaultIsOneRank) {
  EXPECT_EQ(EngineConfig{}.parallel.tensor_parallel_size, 1);
  EXPECT_EQ(error_of(config_with_tp(1)), "");
}

TEST(ParallelConfig, RejectsSizeBelowOneNamingTheField) {
  for (int64_t n : {0, -2}) {
    const std::string msg = error_of(config_with_tp(n));
    EXPECT_NE(msg.find("tensor_parallel_size must be >= 1, got " + std::to_string(n)), std::string::npos) << msg;
  }
  EXPECT_THROW(ParallelConfig{.tensor_parallel_size = 0}.validate(), Error);
  EXPECT_NO_THROW(ParallelConfig{.tensor_parallel_size = 2}.validate());  // valid on its own
}

TEST(ParallelConfig, EngineAcceptsSeveralRanksWithOffloadOnTheCpuBackendOnly) {
  for (int64_t n : {2, 8}) {
    EXPECT_EQ(error_of(config_with_tp(n)), "");
    EngineConfig c = config_with_tp(n);
    c.offload.enabled = true;
    c.model.backend = Backend::kCpu;
    EXPECT_EQ(error_of(c), "");
    c.model.backend = Backend::kCuda;
    const std::string msg = error_of(c);
    EXPECT_NE(msg.find("tensor_parallel_size " + std::to_string(n) +
                       " with CPU offload on the CUDA backend is not implemented yet"),
              std::string::npos)
        << msg;
  }
}

TEST(ParallelConfig, CudaBackendAcceptsSeveralRanks) {
  EngineConfig c = config_with_tp(2);
  c.model.backend = Backend::kCuda;
  EXPECT_EQ(error_of(c), "");  // the GPU count is checked when the runner starts, not here
}