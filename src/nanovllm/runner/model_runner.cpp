#include "nanovllm/runner/model_runner.h"

#include <unordered_map>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/device.h"
#include "nanovllm/runner/cpu_model_runner.h"
#include "nanovllm/runner/tensor_parallel_runner.h"
#if NANOVLLM_WITH_CUDA
#include "nanovllm/runner/cuda/cuda_model_runner.h"
#include "nanovllm/runner/cuda/cuda_tensor_parallel.h"
#endif

namespace nanovllm {

void ModelRunner::set_layer_taps(LayerTaps* taps) {
  taps_ = taps;
  if (OffloadRunner* o = offload_runner()) o->set_layer_taps(taps);
}

OffloadRunner& ModelRunner::offload_or_throw(const char* what) {
  OffloadRunner* o = offload_runner();
  NANOVLLM_CHECK(o != nullptr, what, ": CPU offload is off");
  return *o;
}

void ModelRunner::check_offload_memory(int64_t tokens) { offload_or_throw("check_offload_memory").check_host_memory(tokens); }

int64_t ModelRunner::offload_host_bytes(int64_t tokens) {
  return offload_or_throw("offload_host_bytes").host_bytes_for(tokens);
}

PageCacheCounters ModelRunner::offload_page_cache() {
  OffloadRunner* o = offload_runner();
  return o ? o->sparse_cache_counters() : PageCacheCounters{};
}

RunnerStats ModelRunner::stats() {
  RunnerStats s;
  s.num_kv_blocks = num_kv_blocks();
  if (OffloadRunner* o = offload_runner()) {
    s.offload = OffloadReport{.steps = o->stats(),
                              .footprint = o->footprint(),
                              .sparse_decode = std::nullopt,
                              .lanes = o->num_lanes(),
                              .kv_bytes_per_token_per_layer = o->kv_bytes_per_token_per_layer()};
    if (const OffloadSparseAttention* sparse = o->sparse()) s.offload->sparse_decode = sparse->policy().counters();
  }
  if (const SparseDecodePolicy* p = decode_policy()) s.sparse_decode = p->counters();
  if (const SparsePrefillAttention* p = prefill_policy()) s.sparse_prefill = p->counters();
  return s;
}

bool ModelRunner::can_launch(const SchedulerOutput&) const { return true; }

std::vector<SampledToken> ModelRunner::execute_offloaded(const SchedulerOutput& out) {
  return offload_or_throw("execute_offloaded").execute(out);
}

void ModelRunner::launch(const SchedulerOutput& out, bool fed_from_previous) {
  NANOVLLM_CHECK(launched_.size() < 2, "ModelRunner::launch: two steps are already outstanding");
  if (!fed_from_previous) {
    launched_.push_back(execute(out));
    return;
  }
  // The host already has the previous step's tokens: put them in place of the placeholders for the run.
  NANOVLLM_CHECK(!launched_.empty(), "ModelRunner::launch: fed from a previous step that was not launched");
  std::unordered_map<int64_t, int32_t> previous;
  for (const SampledToken& t : launched_.back()) previous.emplace(t.seq_id, t.token_id);
  auto set_last = [&](bool real) {
    for (const ScheduledSequence& s : out.seqs) {
      auto it = previous.find(s.seq->seq_id);
      NANOVLLM_CHECK(it != previous.end(), "ModelRunner::launch: request ", s.seq->seq_id,
                     " was not in the previous step");
      s.seq->token_ids.back() = real ? it->second : kPendingToken;
    }
  };
  set_last(true);
  std::vector<SampledToken> tokens;
  try {
    tokens = execute(out);
  } catch (...) {
    set_last(false);
    throw;
  }
  set_last(false);
  launched_.push_back(std::move(tokens));
}

std::vector<SampledToken> ModelRunner::wait_oldest() {
  NANOVLLM_CHECK(!launched_.empty(), "ModelRunner::wait_oldest: no launched step");
  std::vector<SampledToken> tokens = std::move(launched_.front());
  launched_.pop_front();
  return tokens;
}

#ifndef NANOVLLM_WITH_CUDA
#define NANOVLLM_WITH_CUDA 0  // for the error message below
#endif

std::unique_ptr<ModelRunner> ModelRunner::create(const EngineConfig& config, const ModelConfig& model_config) {
  switch (config.model.backend) {
    case Backend::kCpu:
      if (config.parallel.tensor_parallel_size > 1) return TensorParallelRunner::create_cpu(config, model_config);
      return std::make_unique<CpuModelRunner>(config, model_config);
    case Backend::kCuda:
      NANOVLLM_CHECK(cuda_device_available(), "the cuda backend needs an NVIDIA GPU and a CUDA build",
                     " (this binary: ", NANOVLLM_WITH_CUDA ? "CUDA build, no usable GPU" : "built without CUDA",
                     "); use --backend cpu");
#if NANOVLLM_WITH_CUDA
      if (config.parallel.tensor_parallel_size > 1) return make_cuda_tensor_parallel_runner(config, model_config);
      return std::make_unique<CudaModelRunner>(config, model_config);
#else
      break;
#endif
  }
  NANOVLLM_FAIL("unreachable backend");
}

}  // namespace nanovllm
