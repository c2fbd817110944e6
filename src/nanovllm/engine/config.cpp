#include "nanovllm/engine/config.h"

#include <algorithm>

#include "nanovllm/core/error.h"

namespace nanovllm {

void ModelOptions::validate() const {
  NANOVLLM_CHECK(max_model_len >= 1, "max_model_len must be >= 1, got ", max_model_len);
}

void CacheConfig::validate(Backend backend) const {
  NANOVLLM_CHECK(block_size > 0 && block_size <= 1024, "block_size must be in [1, 1024]");
  if (backend == Backend::kCuda)
    NANOVLLM_CHECK(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1,
                   "gpu_memory_utilization must be in (0, 1]");
}

void SchedulerConfig::validate() const {
  NANOVLLM_CHECK(max_num_seqs > 0, "max_num_seqs must be > 0");
  NANOVLLM_CHECK(max_num_batched_tokens > 0, "max_num_batched_tokens must be > 0");
}

void OffloadConfig::validate() const {
  NANOVLLM_CHECK(num_kv_buffers >= 1 && num_kv_buffers <= 8, "num_kv_buffers must be in [1, 8], got ", num_kv_buffers);
  NANOVLLM_CHECK(max_num_seqs >= 1 && max_num_seqs <= 64, "offload_max_num_seqs must be in [1, 64], got ",
                 max_num_seqs);
  NANOVLLM_CHECK(block_size >= 1, "offload_block_size must be >= 1, got ", block_size);
  NANOVLLM_CHECK(cpu_memory_limit >= 0, "cpu_memory_limit must be >= 0, got ", cpu_memory_limit);
  NANOVLLM_CHECK(min_tokens >= 0, "offload_min_tokens must be >= 0, got ", min_tokens);
}

SparsePolicy parse_sparse_policy(std::string_view name) {
  if (name == "full") return SparsePolicy::kFull;
  if (name == "quest") return SparsePolicy::kQuest;
  NANOVLLM_FAIL("unknown sparse policy '", name, "' (choose full or quest)");
}

const char* sparse_policy_name(SparsePolicy p) { return p == SparsePolicy::kQuest ? "quest" : "full"; }

void SparseConfig::validate() const {
  NANOVLLM_CHECK(budget_tokens >= 1, "sparse_budget must be >= 1 token, got ", budget_tokens);
  NANOVLLM_CHECK(gpu_cache_tokens <= 0 || gpu_cache_tokens >= budget_tokens, "sparse_gpu_cache_tokens ",
                 gpu_cache_tokens, " must be 0 (no cache), -1 (4 x sparse_budget) or hold a whole selection (>= "
                 "sparse_budget ", budget_tokens, ")");
  NANOVLLM_CHECK(gpu_cache_tokens >= -1, "sparse_gpu_cache_tokens must be >= -1, got ", gpu_cache_tokens);
}

void ParallelConfig::validate() const {
  NANOVLLM_CHECK(tensor_parallel_size >= 1, "tensor_parallel_size must be >= 1, got ", tensor_parallel_size);
  NANOVLLM_CHECK(nnodes >= 1, "nnodes must be >= 1, got ", nnodes);
  NANOVLLM_CHECK(tensor_parallel_size % nnodes == 0, "tensor_parallel_size ", tensor_parallel_size,
                 " must be a multiple of nnodes ", nnodes, " (every node runs the same number of ranks)");
  NANOVLLM_CHECK(node_rank >= 0 && node_rank < nnodes, "node_rank ", node_rank, " outside [0, nnodes ", nnodes, ")");
  if (nnodes > 1) {
    const size_t colon = dist_init_addr.rfind(':');
    NANOVLLM_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < dist_init_addr.size(),
                   "nnodes ", nnodes, " needs dist_init_addr HOST:PORT (node 0's address), got '", dist_init_addr,
                   "'");
  }
}

SparsePrefillPolicy parse_sparse_prefill_policy(std::string_view name) {
  for (SparsePrefillPolicy p : {SparsePrefillPolicy::kDense, SparsePrefillPolicy::kXAttention,
                                SparsePrefillPolicy::kMInference, SparsePrefillPolicy::kFlexPrefill,
                                SparsePrefillPolicy::kAvgPool})
    if (name == sparse_prefill_policy_name(p)) return p;
  NANOVLLM_FAIL("unknown sparse prefill policy '", name,
                "' (choose dense, xattention, minference, flexprefill or avgpool)");
}

const char* sparse_prefill_policy_name(SparsePrefillPolicy p) {
  switch (p) {
    case SparsePrefillPolicy::kXAttention: return "xattention";
    case SparsePrefillPolicy::kMInference: return "minference";
    case SparsePrefillPolicy::kFlexPrefill: return "flexprefill";
    case SparsePrefillPolicy::kAvgPool: return "avgpool";
    case SparsePrefillPolicy::kDense: break;
  }
  return "dense";
}

double SparsePrefillConfig::effective_threshold() const {
  if (threshold > 0) return threshold;
  switch (policy) {
    case SparsePrefillPolicy::kXAttention: return 0.95;  // the seeds' engine default (their factory: 0.9)
    case SparsePrefillPolicy::kMInference: return 0.3;   // the seeds' minference_adaptive_budget
    case SparsePrefillPolicy::kFlexPrefill:              // FlexPrefill's gamma
    case SparsePrefillPolicy::kAvgPool: return 0.9;
    case SparsePrefillPolicy::kDense: break;
  }
  return 1.0;
}

void SparsePrefillConfig::validate() const {
  if (!enabled()) return;
  const char* name = sparse_prefill_policy_name(policy);
  NANOVLLM_CHECK(threshold >= 0 && threshold <= 1,
                 "sparse_prefill_threshold must be in (0, 1] (0: the policy's default), got ", threshold);
  NANOVLLM_CHECK(dense_layers >= 0, "sparse_prefill_dense_layers must be >= 0, got ", dense_layers);
  NANOVLLM_CHECK(min_tokens >= 1, "sparse_prefill_min_tokens must be >= 1, got ", min_tokens);
  NANOVLLM_CHECK(block_size >= 1 && block_size <= 4096, "sparse_prefill_block_size must be in [1, 4096], got ",
                 block_size);
  if (policy == SparsePrefillPolicy::kXAttention)
    NANOVLLM_CHECK(stride >= 1 && block_size % stride == 0, "sparse_prefill_stride ", stride,
                   " must be >= 1 and divide sparse_prefill_block_size ", block_size);
  if (policy == SparsePrefillPolicy::kMInference) {
    NANOVLLM_CHECK(last_q >= 1, "sparse_prefill_last_q must be >= 1, got ", last_q);
    NANOVLLM_CHECK(vertical >= 0 && slash >= 0, "sparse_prefill_vertical and sparse_prefill_slash must be >= 0 ",
                   "(0: adaptive), got ", vertical, " and ", slash);
  }
  NANOVLLM_CHECK(budget_tokens >= 0, "sparse_prefill_budget must be >= 0 (0: no limit), got ", budget_tokens);
  if (budget_tokens > 0) {
    NANOVLLM_CHECK(policy == SparsePrefillPolicy::kXAttention || policy == SparsePrefillPolicy::kAvgPool,
                   "sparse_prefill_budget bounds xattention and avgpool; ", name,
                   " has its own budgets (minference: --sparse-prefill-vertical/--sparse-prefill-slash, flexprefill: "
                   "its threshold and --sparse-prefill-min-budget)");
    NANOVLLM_CHECK(effective_threshold() < 1, "sparse_prefill_budget needs a sparse_prefill_threshold below 1 (at 1 ",
                   "every causal block is kept unranked), got ", effective_threshold());
  }
  if (policy == SparsePrefillPolicy::kFlexPrefill) {
    NANOVLLM_CHECK(tau >= 0, "sparse_prefill_tau must be >= 0, got ", tau);
    NANOVLLM_CHECK(min_budget >= 0, "sparse_prefill_min_budget must be >= 0, got ", min_budget);
  }
}

void EngineConfig::resolve(int64_t model_max_len) {
  if (model.max_model_len <= 0) model.max_model_len = model_max_len;
  NANOVLLM_CHECK(model.max_model_len <= model_max_len, "max_model_len ", model.max_model_len,
                 " exceeds the model's limit of ", model_max_len, " positions");
  validate();
  scheduler.max_num_seqs = std::min(scheduler.max_num_seqs, scheduler.max_num_batched_tokens);
}

void EngineConfig::validate() const {
  model.validate();
  cache.validate(model.backend);
  scheduler.validate();
  if (offload.enabled) {
    offload.validate();
    // The offloaded prompt is at most max_model_len - 1 tokens, and at least one.
    NANOVLLM_CHECK(model.max_model_len >= 2, "offload: max_model_len must be >= 2, got ", model.max_model_len);
    // A batched offloaded decode step samples one row per sequence from the runner's workspace.
    NANOVLLM_CHECK(offload.max_num_seqs <= scheduler.max_num_seqs, "offload_max_num_seqs ", offload.max_num_seqs,
                   " exceeds max_num_seqs ", scheduler.max_num_seqs);
  }
  sparse.validate();
  parallel.validate();
  sparse_prefill.validate();
  if (sparse.policy != SparsePolicy::kFull) {
    const int64_t min_pages = SparseConfig::kSinkPages + SparseConfig::kRecentPages + 1;
    NANOVLLM_CHECK(sparse.budget_pages(cache.block_size) >= min_pages, "sparse_budget ", sparse.budget_tokens,
                   " holds ", sparse.budget_pages(cache.block_size), " pages of block_size ", cache.block_size,
                   " tokens; it needs at least ", min_pages, " (sink, recent window and one selected page)");
  }
}

}  // namespace nanovllm
