#include "nanovllm/runner/model_runner.h"

#include "nanovllm/core/error.h"
#include "nanovllm/runner/cpu_model_runner.h"
#if NANOVLLM_WITH_CUDA
#include "nanovllm/runner/cuda/cuda_model_runner.h"
#endif

namespace nanovllm {

Backend parse_backend(const std::string& name) {
  if (name == "cpu") return Backend::kCpu;
  if (name == "cuda") return Backend::kCuda;
  NANOVLLM_FAIL("unknown backend '", name, "' (expected cpu or cuda)");
}

const char* to_string(Backend b) { return b == Backend::kCpu ? "cpu" : "cuda"; }

void check_runner_config(const RunnerConfig& rc) {
  NANOVLLM_CHECK(rc.block_size > 0 && rc.max_num_seqs > 0 && rc.max_num_batched_tokens > 0 && rc.max_model_len > 0,
                 "runner config: block_size, max_num_seqs, max_num_batched_tokens and max_model_len must be > 0");
}

int64_t blocks_per_max_len_seq(const RunnerConfig& rc) { return (rc.max_model_len + rc.block_size - 1) / rc.block_size; }

#ifndef NANOVLLM_WITH_CUDA
#define NANOVLLM_WITH_CUDA 0
bool cuda_device_available() { return false; }  // the CUDA build defines it in kernels/cuda
#endif

std::unique_ptr<ModelRunner> ModelRunner::create(const std::filesystem::path& model_dir, const ModelConfig& config,
                                                 const RunnerConfig& runner_config) {
  switch (runner_config.backend) {
    case Backend::kCpu:
      return std::make_unique<CpuModelRunner>(model_dir, config, runner_config);
    case Backend::kCuda:
      NANOVLLM_CHECK(cuda_device_available(), "the cuda backend needs an NVIDIA GPU and a CUDA build",
                     " (this binary: ", NANOVLLM_WITH_CUDA ? "CUDA build, no usable GPU" : "built without CUDA",
                     "); use --backend cpu");
#if NANOVLLM_WITH_CUDA
      return std::make_unique<CudaModelRunner>(model_dir, config, runner_config);
#else
      break;
#endif
  }
  NANOVLLM_FAIL("unreachable backend");
}

}  // namespace nanovllm
