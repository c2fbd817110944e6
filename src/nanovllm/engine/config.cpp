#include "nanovllm/engine/config.h"

#include <algorithm>

#include "nanovllm/core/error.h"
#include "nanovllm/engine/engine_options.h"

namespace nanovllm {

void ModelOptions::validate() const {
  NANOVLLM_CHECK(max_model_len >= 1, "max_model_len must be >= 1, got ", max_model_len);
}

void ParallelConfig::validate() const {
  NANOVLLM_CHECK(nnodes >= 1 && tensor_parallel_size % nnodes == 0, "tensor_parallel_size ", tensor_parallel_size,
                 " must be a multiple of nnodes ", nnodes, " (every node runs the same number of ranks)");
  NANOVLLM_CHECK(node_rank < nnodes, "node_rank ", node_rank, " outside [0, nnodes ", nnodes, ")");
  if (nnodes > 1) {
    const size_t colon = dist_init_addr.rfind(':');
    NANOVLLM_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < dist_init_addr.size(),
                   "nnodes ", nnodes, " needs dist_init_addr HOST:PORT (node 0's address), got '", dist_init_addr,
                   "'");
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
  check_engine_option_ranges(*this);  // every option's range (engine_options.h); below, the rules across fields
  model.validate();
  if (offload.enabled) {
    // The offloaded prompt is at most max_model_len - 1 tokens, and at least one.
    NANOVLLM_CHECK(model.max_model_len >= 2, "offload: max_model_len must be >= 2, got ", model.max_model_len);
    // A batched offloaded decode step samples one row per sequence from the runner's workspace.
    NANOVLLM_CHECK(offload.max_num_seqs <= scheduler.max_num_seqs, "offload_max_num_seqs ", offload.max_num_seqs,
                   " exceeds max_num_seqs ", scheduler.max_num_seqs);
  }
  sparse.validate();
  parallel.validate();
  sparse_prefill.validate();
  if (sparse.enabled()) {
    const int64_t min_pages = SparseConfig::kSinkPages + SparseConfig::kRecentPages + 1;
    NANOVLLM_CHECK(sparse.budget_pages(cache.block_size) >= min_pages, "sparse_budget ", sparse.budget_tokens,
                   " holds ", sparse.budget_pages(cache.block_size), " pages of block_size ", cache.block_size,
                   " tokens; it needs at least ", min_pages, " (sink, recent window and one selected page)");
  }
}

}  // namespace nanovllm
