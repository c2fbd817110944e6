#include "nanovllm/sparse/sparse_config.h"

#include "nanovllm/core/error.h"
#include "nanovllm/sparse/policies.h"

namespace nanovllm {

void SparseConfig::validate() const {
  if (!make_custom) find_decode_policy(policy);  // throws naming the choices
  NANOVLLM_CHECK(gpu_cache_tokens <= 0 || gpu_cache_tokens >= budget_tokens, "sparse_gpu_cache_tokens ",
                 gpu_cache_tokens, " must be 0 (no cache), -1 (16 x sparse_budget) or hold a whole selection (>= "
                 "sparse_budget ", budget_tokens, ")");
}

double SparsePrefillConfig::effective_threshold() const {
  return threshold > 0 ? threshold : prefill_policy_info(policy).default_threshold;
}

void SparsePrefillConfig::validate() const {
  if (!enabled()) return;
  const char* name = sparse_prefill_policy_name(policy);
  if (policy == SparsePrefillPolicy::kXAttention)
    NANOVLLM_CHECK(block_size % stride == 0, "sparse_prefill_stride ", stride,
                   " must divide sparse_prefill_block_size ", block_size);
  if (budget_tokens > 0) {
    NANOVLLM_CHECK(policy == SparsePrefillPolicy::kXAttention || policy == SparsePrefillPolicy::kAvgPool,
                   "sparse_prefill_budget bounds xattention and avgpool; ", name,
                   " has its own budgets (minference: --sparse-prefill-vertical/--sparse-prefill-slash, flexprefill: "
                   "its threshold and --sparse-prefill-min-budget)");
    NANOVLLM_CHECK(effective_threshold() < 1, "sparse_prefill_budget needs a sparse_prefill_threshold below 1 (at 1 ",
                   "every causal block is kept unranked), got ", effective_threshold());
  }
}

}  // namespace nanovllm
