#include "nanovllm/sparse/policies.h"

#include "nanovllm/core/error.h"
#include "nanovllm/sparse/keyscore_attention.h"
#include "nanovllm/sparse/quest_attention.h"

namespace nanovllm {
namespace {

const DecodePolicyInfo kDecodePolicies[] = {
    {"full", "dense attention over every page", nullptr, nullptr, true},
    {"quest", "Quest: per KV head the pages with the highest q.k upper bound from their keys' min/max",
     [](const PagedKvShape& shape, int64_t budget_pages, Allocator& alloc) -> std::unique_ptr<SparseDecodePolicy> {
       return std::make_unique<QuestAttention>(shape, budget_pages, alloc);
     },
     &QuestAttention::metadata_bytes_per_block, true},
    {"keyscore", "per KV head the pages whose keys score highest against the query, from a 4-bit copy of every key",
     [](const PagedKvShape& shape, int64_t budget_pages, Allocator& alloc) -> std::unique_ptr<SparseDecodePolicy> {
       return std::make_unique<KeyScoreAttention>(shape, budget_pages, alloc);
     },
     &KeyScoreAttention::metadata_bytes_per_block, false},
};

using E = SparsePrefillOptions::Estimator;
const PrefillPolicyInfo kPrefillPolicies[] = {
    {SparsePrefillPolicy::kDense, "dense", "dense causal attention", 1.0, nullptr},
    // The seeds' engine default (their factory: 0.9).
    {SparsePrefillPolicy::kXAttention, "xattention", "antidiagonal block scores, blocks up to a cumulative share",
     0.95,
     [](const SparsePrefillConfig& c, double threshold, SparsePrefillOptions& o) {
       o.estimator = E::kXAttention;
       o.xattention = {.stride = c.stride, .threshold = threshold, .max_blocks = c.budget_blocks()};
     }},
    // The seeds' minference_adaptive_budget.
    {SparsePrefillPolicy::kMInference, "minference", "vertical-slash from the chunk's last queries", 0.3,
     [](const SparsePrefillConfig& c, double threshold, SparsePrefillOptions& o) {
       o.estimator = E::kVerticalSlash;
       o.vertical_slash = {.last_q = c.last_q,
                           .vertical = c.vertical,
                           .slash = c.slash,
                           .sink_tokens = SparsePrefillConfig::kMinferenceSinkTokens,
                           .recent_diagonals = SparsePrefillConfig::kMinferenceRecentDiagonals};
       o.budget_share = threshold;
     }},
    // FlexPrefill's gamma.
    {SparsePrefillPolicy::kFlexPrefill, "flexprefill",
     "per head query-aware or vertical-slash (Jensen-Shannon test), up to a mass gamma", 0.9,
     [](const SparsePrefillConfig& c, double threshold, SparsePrefillOptions& o) {
       o.estimator = E::kFlexPrefill;
       o.flexprefill = {.gamma = threshold, .tau = c.tau, .min_budget = c.min_budget};
     }},
    {SparsePrefillPolicy::kAvgPool, "avgpool", "block-mean pooled q.k, blocks up to a cumulative share", 0.9,
     [](const SparsePrefillConfig& c, double threshold, SparsePrefillOptions& o) {
       o.estimator = E::kAvgPool;
       o.avgpool = {.threshold = threshold, .max_blocks = c.budget_blocks()};
     }},
};

template <class Table>
std::string choices(const Table& table) {
  std::string s;
  for (const auto& p : table) s += (s.empty() ? "" : " | ") + std::string(p.name);
  return s;
}

}  // namespace

std::span<const DecodePolicyInfo> decode_policies() { return kDecodePolicies; }

const DecodePolicyInfo& find_decode_policy(std::string_view name) {
  for (const DecodePolicyInfo& p : kDecodePolicies)
    if (name == p.name) return p;
  NANOVLLM_FAIL("unknown sparse policy '", name, "' (choose ", decode_policy_choices(), ")");
}

std::string decode_policy_choices() { return choices(kDecodePolicies); }

std::unique_ptr<SparseDecodePolicy> make_sparse_decode_policy(const SparseConfig& config, const PagedKvShape& shape,
                                                              Allocator& alloc) {
  const int64_t budget_pages = config.budget_pages(shape.block_size);
  if (config.make_custom) return config.make_custom(shape, budget_pages, alloc);
  const DecodePolicyInfo& p = find_decode_policy(config.policy);
  return p.make ? p.make(shape, budget_pages, alloc) : nullptr;
}

SparseDecodeBytes sparse_decode_bytes(const SparseConfig& config, const PagedKvShape& shape) {
  if (!config.enabled()) return {};
  const int64_t budget_pages = config.budget_pages(shape.block_size);
  const DecodePolicyInfo* p = config.make_custom ? nullptr : &find_decode_policy(config.policy);
  // A caller's policy may keep page metadata we cannot see: count Quest's (two keys' worth per block) for it.
  const int64_t per_block = p ? p->metadata_bytes_per_block(shape) : QuestAttention::metadata_bytes_per_block(shape);
  return {.per_block = per_block, .fixed = SparseDecodePolicy::workspace_bytes(shape, budget_pages)};
}

std::span<const PrefillPolicyInfo> prefill_policies() { return kPrefillPolicies; }

const PrefillPolicyInfo& prefill_policy_info(SparsePrefillPolicy policy) {
  for (const PrefillPolicyInfo& p : kPrefillPolicies)
    if (p.policy == policy) return p;
  NANOVLLM_FAIL("unregistered sparse prefill policy ", static_cast<int>(policy));
}

std::string prefill_policy_choices() { return choices(kPrefillPolicies); }

SparsePrefillPolicy parse_sparse_prefill_policy(std::string_view name) {
  for (const PrefillPolicyInfo& p : kPrefillPolicies)
    if (name == p.name) return p.policy;
  NANOVLLM_FAIL("unknown sparse prefill policy '", name, "' (choose ", prefill_policy_choices(), ")");
}

const char* sparse_prefill_policy_name(SparsePrefillPolicy p) { return prefill_policy_info(p).name; }

std::unique_ptr<SparsePrefillAttention> make_sparse_prefill_policy(const SparsePrefillConfig& c,
                                                                   int64_t num_query_heads, int64_t num_kv_heads,
                                                                   Allocator& alloc) {
  const PrefillPolicyInfo& p = prefill_policy_info(c.policy);
  if (p.configure == nullptr) return nullptr;
  SparsePrefillOptions o;
  o.block_size = c.block_size;
  o.first_sparse_layer = c.dense_layers;
  o.min_context = c.min_tokens;
  o.count_on_device = c.count_blocks;
  p.configure(c, c.effective_threshold(), o);
  return std::make_unique<SparsePrefillAttention>(o, num_query_heads, num_kv_heads, alloc);
}

}  // namespace nanovllm
