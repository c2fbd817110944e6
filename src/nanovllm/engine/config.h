// EngineConfig: every setting of an engine, in sub-configs, passed whole to whoever reads it (the
// scheduler, the runners, the offload path, LLMEngine) — never copied field by field into look-alikes.
// Here in engine/, the lowest layer that reads it; runner/ and llm/ include it.
//
// Each field's name, range, default and help are one row of the option table (engine_options.h), which also
// makes the CLI flags and the Python keywords; each sub-config checks its rules across fields. EngineConfig::
// resolve() runs every check once (LLMEngine's constructor), after filling in what depends on the model.
// LLMEngine::config() holds the values in use: max_model_len and num_kv_blocks resolved, max_num_seqs capped.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "nanovllm/core/backend.h"
#include "nanovllm/core/dtype.h"
#include "nanovllm/sparse/sparse_config.h"  // SparseConfig, SparsePrefillConfig

namespace nanovllm {

// What runs, and where. (ModelConfig, model/config.h, is the checkpoint's parsed config.json.)
struct ModelOptions {
  std::filesystem::path path;        // a Hugging Face model directory
  Backend backend = Backend::kCpu;   // default_backend() (kernels/device.h): cuda when a GPU is present
  int64_t max_model_len = 0;         // longest prompt + output; 0: the model's limit (rope-scaled max positions)
  uint64_t seed = 0;                 // engine RNG: gives unseeded requests their sampling key (Scheduler::add)
  bool enforce_eager = false;        // CUDA backend: no decode CUDA graphs
  // Projection weights (docs/fp8.md): "auto" as the checkpoint holds them (fp8 for a block-scaled FP8
  // checkpoint), "fp8" also quantizes a bf16 checkpoint per 128 x 128 block at load, "none" dequantizes an FP8
  // checkpoint at load. The CPU backend always computes with f32 weights (fp8 ones dequantized).
  std::string quantization = "auto";

  void validate() const;
};

// The paged KV cache.
struct CacheConfig {
  int64_t block_size = 16;              // tokens per KV block, 1..1024
  int64_t num_kv_blocks = 0;            // 0: from the memory budget (the runner decides)
  int64_t kv_cache_bytes = 2LL << 30;   // CPU backend KV budget
  double gpu_memory_utilization = 0.9;  // CUDA backend: share of GPU memory the engine may use
  bool enable_prefix_caching = true;
  // KV cache elements, here and in the offload path (docs/kv_cache.md): "auto" = the activations' dtype (bf16 on
  // CUDA, f32 on the CPU backend), "bf16", or "fp8" (= "fp8_e4m3": e4m3 codes and one f32 scale per token and
  // KV head, about half the bytes of bf16).
  std::string kv_cache_dtype = "auto";

  int64_t blocks_for(int64_t num_tokens) const { return (num_tokens + block_size - 1) / block_size; }
  bool kv_cache_fp8() const { return kv_cache_dtype == "fp8" || kv_cache_dtype == "fp8_e4m3"; }
  // The cache's element dtype when the activations are `activation`.
  DType kv_dtype(DType activation) const {
    return kv_cache_fp8() ? DType::kF8E4M3 : kv_cache_dtype == "bf16" ? DType::kBF16 : activation;
  }
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
};

// Long context: layer-wise CPU KV offload (offload/offload_runner.h). A request is offloaded when its
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
  // nnodes divides tensor_parallel_size (with CPU offload, every rank offloads its own KV heads); node_rank <
  // nnodes; dist_init_addr "HOST:PORT" when nnodes > 1. (Each field's own range: engine_options.h.)
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
