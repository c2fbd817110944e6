#include "nanovllm/runner/sparse_policy.h"

#include "nanovllm/kernels/sparse_ops.h"

namespace nanovllm {
namespace {

QuestShape quest_shape(const EngineConfig& config, const ModelConfig& model, int64_t num_kv_blocks, DType kv_dtype) {
  return {.num_layers = model.num_hidden_layers,
          .num_blocks = num_kv_blocks,
          .block_size = config.cache.block_size,
          .num_kv_heads = model.num_key_value_heads,
          .num_query_heads = model.num_attention_heads,
          .head_dim = model.head_dim,
          .kv_dtype = kv_dtype,
          .max_num_seqs = config.scheduler.max_num_seqs,
          .max_blocks_per_seq = config.blocks_per_max_len_seq() + 1};
}

}  // namespace

std::unique_ptr<QuestAttention> make_sparse_policy(const EngineConfig& config, const ModelConfig& model,
                                                   int64_t num_kv_blocks, DType kv_dtype, Allocator& alloc) {
  if (config.sparse.policy != SparsePolicy::kQuest) return nullptr;
  return std::make_unique<QuestAttention>(quest_shape(config, model, num_kv_blocks, kv_dtype),
                                          config.sparse.budget_pages(config.cache.block_size),
                                          SparseConfig::kSinkPages, SparseConfig::kRecentPages, alloc);
}

std::unique_ptr<SparsePrefillAttention> make_sparse_prefill_policy(const EngineConfig& config,
                                                                   const ModelConfig& model, Allocator& alloc) {
  const SparsePrefillConfig& c = config.sparse_prefill;
  if (!c.enabled()) return nullptr;
  using E = SparsePrefillOptions::Estimator;
  SparsePrefillOptions o;
  o.block_size = c.block_size;
  o.first_sparse_layer = c.dense_layers;
  o.min_context = c.min_tokens;
  o.count_on_device = c.count_blocks;
  const double threshold = c.effective_threshold();
  switch (c.policy) {
    case SparsePrefillPolicy::kXAttention:
      o.estimator = E::kXAttention;
      o.xattention = {.stride = c.stride, .threshold = threshold, .max_blocks = c.budget_blocks()};
      break;
    case SparsePrefillPolicy::kMInference:
      o.estimator = E::kVerticalSlash;
      o.vertical_slash = {.last_q = c.last_q,
                          .vertical = c.vertical,
                          .slash = c.slash,
                          .sink_tokens = SparsePrefillConfig::kMinferenceSinkTokens,
                          .recent_diagonals = SparsePrefillConfig::kMinferenceRecentDiagonals};
      o.budget_share = threshold;
      break;
    case SparsePrefillPolicy::kFlexPrefill:
      o.estimator = E::kFlexPrefill;
      o.flexprefill = {.gamma = threshold, .tau = c.tau, .min_budget = c.min_budget};
      break;
    case SparsePrefillPolicy::kAvgPool:
      o.estimator = E::kAvgPool;
      o.avgpool = {.threshold = threshold, .max_blocks = c.budget_blocks()};
      break;
    case SparsePrefillPolicy::kDense: return nullptr;
  }
  return std::make_unique<SparsePrefillAttention>(o, model.num_attention_heads, model.num_key_value_heads, alloc);
}

SparsePolicyBytes sparse_policy_bytes(const EngineConfig& config, const ModelConfig& model, DType kv_dtype) {
  if (config.sparse.policy != SparsePolicy::kQuest) return {};
  const QuestShape q = quest_shape(config, model, 0, kv_dtype);
  const int64_t pages = config.sparse.budget_pages(config.cache.block_size);
  SparsePolicyBytes b;
  b.per_block = q.num_layers * 2 * q.num_kv_heads * q.head_dim * static_cast<int64_t>(dtype_size(kv_dtype));
  b.fixed = 4 * (q.max_num_seqs * q.num_kv_heads * (q.max_blocks_per_seq + pages) +
                 ops::sparse_decode_scratch_ints(q.max_num_seqs, q.num_kv_heads, pages, q.block_size));
  return b;
}

}  // namespace nanovllm
