// ParallelConfig: its fields' ranges (the option table) and its rules across them, through EngineConfig::validate; EngineConfig accepts N > 1 on both backends (the
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
  EXPECT_NO_THROW(ParallelConfig{.tensor_parallel_size = 2}.validate());  // valid on its own
}

TEST(ParallelConfig, EngineAcceptsSeveralRanksWithOffloadOnEitherBackend) {
  for (int64_t n : {2, 8})
    for (Backend backend : {Backend::kCpu, Backend::kCuda}) {
      EngineConfig c = config_with_tp(n);
      c.offload.enabled = true;
      c.model.backend = backend;
      EXPECT_EQ(error_of(c), "") << "TP" << n;
    }
}

TEST(ParallelConfig, MultiNodeGroupsNeedWholeNodesARankAndAnAddress) {
  const ParallelConfig ok{.tensor_parallel_size = 4, .nnodes = 2, .node_rank = 1, .dist_init_addr = "10.0.0.1:29500"};
  EXPECT_NO_THROW(ok.validate());
  EXPECT_EQ(ok.ranks_per_node(), 2);
  auto error = [](ParallelConfig p) {
    EngineConfig c;
    c.model.max_model_len = 64;
    c.parallel = std::move(p);
    return error_of(c);
  };
  ParallelConfig p = ok;
  p.nnodes = 3;
  EXPECT_NE(error(p).find("tensor_parallel_size 4 must be a multiple of nnodes 3"), std::string::npos);
  p = ok;
  p.nnodes = 0;
  EXPECT_NE(error(p).find("nnodes must be >= 1, got 0"), std::string::npos);
  p = ok;
  p.node_rank = 2;
  EXPECT_NE(error(p).find("node_rank 2 outside [0, nnodes 2)"), std::string::npos);
  p = ok;
  p.node_rank = -1;
  EXPECT_NE(error(p).find("node_rank must be >= 0, got -1"), std::string::npos);
  for (const char* bad : {"", "10.0.0.1", ":29500", "10.0.0.1:"}) {
    p = ok;
    p.dist_init_addr = bad;
    EXPECT_NE(error(p).find("nnodes 2 needs dist_init_addr HOST:PORT"), std::string::npos) << bad;
  }
  p = ok;
  p.nnodes = 1;
  p.node_rank = 0;
  p.dist_init_addr = "";
  EXPECT_EQ(error(p), "");  // one node needs no address
}

TEST(ParallelConfig, CudaBackendAcceptsSeveralRanks) {
  EngineConfig c = config_with_tp(2);
  c.model.backend = Backend::kCuda;
  EXPECT_EQ(error_of(c), "");  // the GPU count is checked when the runner starts, not here
}