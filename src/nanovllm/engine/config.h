// EngineConfig: every setting of an engine, in sub-configs, passed whole to whoever reads it (the
// scheduler, the runners, the offload path, LLMEngine) — never copied field by field into look-alikes.
// Here in engine/, the lowest layer that reads it; runner/ and llm/ include it.
//
// Each sub-config validates itself; EngineConfig::resolve() runs them all once (LLMEngine's constructor),
// after filling in what depends on the model. LLMEngine::config() holds the values in use: max_model_len
// and num_kv_blocks resolved, max_num_seqs capped.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "nanovllm/core/backend.h"

namespace nanovllm {

// What runs, and where. (ModelConfig, model/config.h, is the checkpoint's parsed config.json.)
struct ModelOptions {
  std::filesystem::path path;        // a Hugging Face model directory
  Backend backend = Backend::kCpu;   // default_backend() (kernels/device.h): cuda when a GPU is present
  int64_t max_model_len = 0;         // longest prompt + output; 0: the model's limit (rope-scaled max positions)
  uint64_t seed = 0;                 // engine RNG: gives unseeded requests their sampling key (Scheduler::add)
  bool enforce_eager = false;        // CUDA backend: no decode CUDA graphs

  void validate() const;
};

// The paged KV cache.
struct CacheConfig {
  int64_t block_size = 16;              // tokens per KV block, 1..1024
  int64_t num_kv_blocks = 0;            // 0: from the memory budget (the runner decides)
  int64_t kv_cache_bytes = 2LL << 30;   // CPU backend KV budget
  double gpu_memory_utilization = 0.9;  // CUDA backend: share of GPU memory the engine may use
  bool enable_prefix_caching = true;

  // gpu_memory_utilization is checked only where it is read (the CUDA backend).
  void validate(Backend backend) const;
  int64_t blocks_for(int64_t num_tokens) const { return (num_tokens + block_size - 1) / block_size; }
};

// What each step runs.
struct SchedulerConfig {
  int64_t max_num_seqs = 256;             // capped at max_num_batched_tokens (one sampled row per sequence)
  int64_t max_num_batched_tokens = 8192;  // token budget of one step
  bool enable_chunked_prefill = true;     // off: a prompt waits until it fits one step whole
  // Schedule step N + 1 while step N runs on the device (Scheduler::can_schedule_ahead): decode steps
  // then follow each other on the GPU without waiting for the host. Off: every step is scheduled after
  // the previous one's tokens are read (the same tokens either way).
  bool async_scheduling = true;

  void validate() const;
};

// Long context: layer-wise CPU KV offload (runner/offload_runner.h). A request is offloaded when its
// prompt + max_tokens (capped at max_model_len) does not fit the whole paged KV cache, or reaches
// min_tokens when that is > 0. Up to max_num_seqs offloaded requests run together (their decode steps
// batched), next to the others.
struct OffloadConfig {
  bool enabled = false;
  int64_t num_kv_buffers = 4;     // decode ring of whole-layer KV buffers (and prefill ping-pong), 1..8
  int64_t max_num_seqs = 1;       // offloaded sequences at once, 1..64: each has its own host pool, and
                                  // every ring buffer holds a layer of each (GPU memory grows with it)
  int64_t block_size = 1024;      // host KV block in tokens: decode buffer length, flush granularity
  int64_t cpu_memory_limit = 0;   // bytes of host KV pool; 0: the machine's available memory
  int64_t min_tokens = 0;         // offload requests this long (prompt + max_tokens) or longer;
                                  // 0: only those that do not fit

  void validate() const;  // the fields above; EngineConfig::validate calls it only when enabled
};

// Sparse decode attention (sparse/): a decode query attends only the pages of its context a policy selects
// within a token budget. A page is one KV cache block (cache.block_size tokens). Every selection keeps the
// first page (attention sink) and the last two (the query's own page and the one before it). Prefill and
// mixed steps stay dense. Both backends, with or without CPU offload: offloaded, only the selected pages
// cross PCIe, and a GPU cache of gpu_cache_tokens per layer and KV head keeps recently selected ones.
enum class SparsePolicy {
  kFull,   // dense attention: every page
  kQuest,  // Quest: per page and KV head an upper bound of q.k from the keys' element-wise min/max
};
SparsePolicy parse_sparse_policy(std::string_view name);  // "full" | "quest"; throws naming the choices
const char* sparse_policy_name(SparsePolicy p);

struct SparseConfig {
  SparsePolicy policy = SparsePolicy::kFull;
  int64_t budget_tokens = 2048;  // keys one decode query attends at most (whole pages, sink and recent included)
  int64_t gpu_cache_tokens = -1;  // offload: cached tokens per layer and KV head; 0: none; -1: 4 x budget_tokens

  static constexpr int64_t kSinkPages = 1;
  static constexpr int64_t kRecentPages = 2;
  // The budget in whole pages of `page_size` tokens.
  int64_t budget_pages(int64_t page_size) const { return budget_tokens / page_size; }
  int64_t cache_tokens() const { return gpu_cache_tokens < 0 ? 4 * budget_tokens : gpu_cache_tokens; }
  void validate() const;
};

// Tensor parallel (docs/tensor_parallel.md, issue #34): one model split over tensor_parallel_size ranks
// (GPUs, or threads on the CPU backend), driven by one scheduler. The checks that need the model (heads and
// intermediate size divisible) are validate_tensor_parallel (model/tensor_parallel_plan.h).
struct ParallelConfig {
  int64_t tensor_parallel_size = 1;
  // Past one host (docs/tensor_parallel.md, section 7): nnodes processes, one per host, each running
  // tensor_parallel_size / nnodes ranks; node 0 runs the engine and listens on dist_init_addr
  // ("HOST:PORT"), nodes 1..nnodes-1 run `nanovllm worker` and connect to it.
  int64_t nnodes = 1;
  int64_t node_rank = 0;
  std::string dist_init_addr{};

  int64_t ranks_per_node() const { return tensor_parallel_size / nnodes; }
  int64_t first_rank() const { return node_rank * ranks_per_node(); }  // this node's ranks: first_rank() + 0..
  // tensor_parallel_size >= 1 (with CPU offload, every rank offloads its own KV heads); nnodes >= 1
  // divides it; node_rank in [0, nnodes); dist_init_addr "HOST:PORT" when nnodes > 1.
  void validate() const;
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
// "dense" | "xattention" | "minference" | "flexprefill" | "avgpool"; throws naming the choices.
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

struct EngineConfig {
  // {} initializers: a designated initializer may name only some, e.g. {.model = {.path = dir}}.
  ModelOptions model{};
  CacheConfig cache{};
  SchedulerConfig scheduler{};
  OffloadConfig offload{};
  SparseConfig sparse{};
  ParallelConfig parallel{};
  SparsePrefillConfig sparse_prefill{};

  // Once, before anything is built from the config: model.max_model_len 0 (or less) becomes
  // model_max_len and may not exceed it, every sub-config validates itself, and max_num_seqs is capped
  // at max_num_batched_tokens (a step never has more sequences than tokens). Throws nanovllm::Error
  // naming the field.
  void resolve(int64_t model_max_len);
  void validate() const;  // each sub-config's validate, and the checks across them

  // KV blocks one max_model_len sequence needs.
  int64_t blocks_per_max_len_seq() const { return cache.blocks_for(model.max_model_len); }
};

}  // namespace nanovllm
