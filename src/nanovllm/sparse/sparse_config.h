// The sparse attention settings of an engine (EngineConfig::sparse and ::sparse_prefill), here beside the policies
// they choose, so that a new policy is a change to sparse/ alone (docs/design.md, "Add a sparse policy").
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace nanovllm {

class Allocator;
class SparseDecodePolicy;
struct PagedKvShape;

// Sparse decode attention: a decode query attends only the pages of its context a policy selects within a token
// budget. A page is one KV cache block (cache.block_size tokens). Every selection keeps the first page (attention
// sink) and the last two (the query's own page and the one before it). Prefill and mixed steps stay dense. Both
// backends, with or without CPU offload: offloaded, only the selected pages cross PCIe, and a GPU cache of
// gpu_cache_tokens per layer and KV head keeps recently selected ones.
struct SparseConfig {
  std::string policy = "full";  // a name of decode_policies() (sparse/policies.h); "full": dense attention
  int64_t budget_tokens = 2048;  // keys one decode query attends at most (whole pages, sink and recent included)
  // offload: cached tokens per layer and KV head; 0: none; -1: kDefaultCacheBudgets x budget_tokens (the offload
  // runner caps the cache at a sequence's tokens)
  int64_t gpu_cache_tokens = -1;
  // C++ only: the caller's own policy (a SparseDecodePolicy subclass) instead of a registered one, made for each
  // paged cache a runner serves (GPU-resident, offloaded, every tensor-parallel rank); `policy` is then its name
  // in messages. Not an option of the CLI or Python.
  std::function<std::unique_ptr<SparseDecodePolicy>(const PagedKvShape& shape, int64_t budget_pages, Allocator& alloc)>
      make_custom;

  static constexpr int64_t kSinkPages = 1;
  static constexpr int64_t kRecentPages = 2;
  // The default cache: 16 selections (H200, 4B YaRN at 128K, fp8 KV, Quest 2048: hit rate 16% -> 41% and one
  // request 8.0 -> 7.1 ms/token over 4 selections; 4 requests 202 -> 254 tok/s; docs/kv_cache.md).
  static constexpr int64_t kDefaultCacheBudgets = 16;
  bool enabled() const { return policy != "full"; }
  // The budget in whole pages of `page_size` tokens.
  int64_t budget_pages(int64_t page_size) const { return budget_tokens / page_size; }
  int64_t cache_tokens() const { return gpu_cache_tokens < 0 ? kDefaultCacheBudgets * budget_tokens : gpu_cache_tokens; }
  void validate() const;  // the policy is registered; the budget and cache sizes
};

// Sparse prefill attention (sparse/sparse_prefill_attention.h): a prefill chunk of one sequence whose context
// (prefix + chunk) reaches min_tokens attends, per KV head and query block of `block_size` tokens, only the key
// blocks (and, for minference, single key columns) an estimator picks from the chunk's queries and keys; the first
// dense_layers layers stay dense (and decode steps, short chunks, steps of two prefills; a chunk after decodes is
// fine). Every policy runs on both backends, with or without CPU offload.
enum class SparsePrefillPolicy {
  kDense,        // no estimator: dense causal attention
  kXAttention,   // antidiagonal block scores, blocks up to a cumulative share tau
  kMInference,   // vertical-slash from the chunk's last queries
  kFlexPrefill,  // per head query-aware or vertical-slash (Jensen-Shannon test), up to a mass gamma
  kAvgPool,      // block-mean pooled q.k, blocks up to a cumulative share
};
// The names of prefill_policies() (sparse/policies.h); throws naming the choices.
SparsePrefillPolicy parse_sparse_prefill_policy(std::string_view name);
const char* sparse_prefill_policy_name(SparsePrefillPolicy p);

struct SparsePrefillConfig {
  SparsePrefillPolicy policy = SparsePrefillPolicy::kDense;
  // The policy's threshold in (0, 1]; 0: its default. xattention: tau (0.95), flexprefill: gamma (0.9), avgpool:
  // the pooled mass share (0.9); at 1 these keep every causal block. minference: the share of the context spent on
  // adaptive vertical/slash counts (0.3: vertical = max(31, 0.2 x share x context), slash = max(101, 0.8 x ...)).
  double threshold = 0;
  int64_t dense_layers = 0;   // the first N layers stay dense
  int64_t min_tokens = 8192;  // chunks whose context (prefix + chunk) is shorter stay dense
  int64_t block_size = 128;   // pattern block: tokens per query block and per key block
  int64_t stride = 8;         // xattention: antidiagonal tile side (divides block_size)
  int64_t last_q = 64;        // minference: the chunk's last queries the estimate reads
  int64_t vertical = 0;       // minference: columns kept per query head; 0: adaptive (threshold)
  int64_t slash = 0;          // minference: diagonals kept per query head; 0: adaptive (threshold)
  double tau = 0.1;           // flexprefill: Jensen-Shannon distance below which a head is query-aware
  int64_t min_budget = 1024;  // flexprefill: at least this many tokens of vertical and of slash blocks
  // xattention, avgpool: per query block at most this many key tokens (whole blocks, sink and diagonal included) when
  // the group's choices list more; 0: no limit. Bounds the prefill's attention work on flat attention (kBlockBudget,
  // kernels/estimator_params.h).
  int64_t budget_tokens = 0;
  int64_t budget_blocks() const {  // the budget in pattern blocks (at least the sink and the diagonal); 0: no limit
    return budget_tokens > 0 ? std::max<int64_t>(2, (budget_tokens + block_size - 1) / block_size) : 0;
  }
  // Count the attended blocks of every sparse chunk (SparsePrefillCounters) on a GPU too: reads each pattern back,
  // a stream sync per (layer, chunk), so only observers (eval, bench) turn it on. The CPU backend always counts.
  bool count_blocks = false;

  static constexpr int64_t kMinferenceSinkTokens = 30;        // columns always kept
  static constexpr int64_t kMinferenceRecentDiagonals = 100;  // diagonals always kept
  bool enabled() const { return policy != SparsePrefillPolicy::kDense; }
  double effective_threshold() const;  // threshold, or the policy's default when 0
  void validate() const;
};

}  // namespace nanovllm
