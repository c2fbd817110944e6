// Every sparse attention policy the engine runs, by name: the one registry the option checks, the runners
// (GPU-resident and offloaded alike) and the help texts read. Adding a policy (docs/design.md):
//   decode:  a SparseDecodePolicy subclass in sparse/ (it scores pages; the base selects and attends) and one row
//            of decode_policies();
//   prefill: an estimator (kernels/pattern_estimators.h), an enum value in sparse_config.h and one row of
//            prefill_policies().
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "nanovllm/sparse/decode_policy.h"
#include "nanovllm/sparse/sparse_config.h"
#include "nanovllm/sparse/sparse_prefill_attention.h"

namespace nanovllm {

struct DecodePolicyInfo {
  const char* name;
  const char* help;  // one line for the option's help text
  // The policy over `shape` with a budget of `budget_pages` pages, its buffers from `alloc`; nullptr for "full"
  // (dense attention needs no policy).
  std::unique_ptr<SparseDecodePolicy> (*make)(const PagedKvShape& shape, int64_t budget_pages, Allocator& alloc);
  // Device bytes of its page metadata per KV block (the CUDA runner leaves room for it when it sizes the cache).
  int64_t (*metadata_bytes_per_block)(const PagedKvShape& shape);
  bool dual_chunk_attention;  // it scores pages of Dual Chunk Attention models (score_pages_dual_chunk)
};
std::span<const DecodePolicyInfo> decode_policies();
const DecodePolicyInfo& find_decode_policy(std::string_view name);  // throws naming the choices
std::string decode_policy_choices();                               // "full | quest"

// config.policy's policy over `shape` (the budget in pages of shape.block_size); nullptr when it is "full".
std::unique_ptr<SparseDecodePolicy> make_sparse_decode_policy(const SparseConfig& config, const PagedKvShape& shape,
                                                              Allocator& alloc);
// Device bytes make_sparse_decode_policy allocates: per_block x num_blocks + fixed (0, 0 when dense).
struct SparseDecodeBytes {
  int64_t per_block = 0;  // page metadata
  int64_t fixed = 0;      // selection and attention workspace for shape.max_num_seqs sequences
};
SparseDecodeBytes sparse_decode_bytes(const SparseConfig& config, const PagedKvShape& shape);

struct PrefillPolicyInfo {
  SparsePrefillPolicy policy;
  const char* name;
  const char* help;
  double default_threshold;  // SparsePrefillConfig::threshold 0 means this
  // The estimator's options from the config (threshold resolved); nullptr for "dense".
  void (*configure)(const SparsePrefillConfig& config, double threshold, SparsePrefillOptions& options);
};
std::span<const PrefillPolicyInfo> prefill_policies();
const PrefillPolicyInfo& prefill_policy_info(SparsePrefillPolicy policy);
std::string prefill_policy_choices();  // "dense | xattention | ..."

// config.policy's estimator with its pattern buffer on `alloc`'s device; nullptr when the policy is dense.
// num_query_heads / num_kv_heads: the model's (with tensor parallel, the rank's).
std::unique_ptr<SparsePrefillAttention> make_sparse_prefill_policy(const SparsePrefillConfig& config,
                                                                   int64_t num_query_heads, int64_t num_kv_heads,
                                                                   Allocator& alloc);

}  // namespace nanovllm
