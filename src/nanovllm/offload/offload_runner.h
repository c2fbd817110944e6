// OffloadRunner: long context on one device through layer-wise CPU KV offload, exact and asynchronous.
// Backend-neutral: it drives Decoder layer by layer over an OffloadDevice (CPU: memcpy + checked
// events; CUDA: streams + events). Up to offload.max_num_seqs offloaded sequences at once, each in a lane:
// its own host pool, decode buffers, and region of every layer buffer. A step runs the whole prompts of
// the sequences it admits (one after the other) and one batched decode token for the others. With tensor
// parallel every rank has one over its own model (its KV heads, its pools), and the ranks run each step
// together on their threads (the layers' collectives pair up: ModelRunner::execute_offloaded).
//
// Lanes: a sequence takes a free lane at its prefill and keeps it until a step's SchedulerOutput no longer
// lists it. That is exact because the offload lane's scheduler lists every running sequence in every step
// (its blocks cover max_num_seqs sequences of max_model_len, so it never preempts, and its token budget
// holds every decode), so a sequence absent from a step has finished or was aborted.
//
// Prefill (the whole prompt, one layer at a time): only hidden + residual [T, H] persist across layers.
// Each layer runs in token chunks of C rows (the runner's workspace): the chunk's qkv prologue writes
// its K/V into the lane's region of a GPU layer buffer at positions [start, start + C) and attends
// positions 0..start+C-1 of it (chunked prefill with the region as a paged cache whose block table is
// its blocks in order). The finished layer goes to the lane's host pool on the D2H queue while the next
// layer computes into the next buffer; a buffer is reused only after its D2H event.
//
// Decode: a ring of num_kv_buffers whole-layer buffers. Slot s = l % num_kv_buffers holds, for layer l
// and in each decoding sequence's lane,
//   [0, F)       tokens flushed to the host pool, loaded on slot s's queue (after slot s's compute-done),
//   [F, n)       tokens still in the lane's decode buffer for the layer (copied in, with every lane's, by one
//                copy_batch_d2d launch; the new token goes back to the decode buffers the same way),
//   n            the new token, written by the qkv prologue,
// and layers l+1 .. l+num_kv_buffers-1 load while layer l computes. The new token's K/V is appended to
// the decode buffer; when position n + 1 closes a host block (multiple of offload.block_size) the
// lane's decode buffers [F, n] go to its host pool and F = n + 1. The prompt's partial last block stays
// in the host pool (F = prompt length after prefill), so the first flush writes only the block's remainder.
//
// GPU memory: num_kv_buffers x lanes x one layer's KV at max_model_len + decode buffers (lanes x L x
// offload.block_size tokens) + hidden and residual [max_model_len, H] + the runner's workspace.
//
// KV format (cache.kv_cache_dtype, kernels/kv_cache.h): every K / V store here — host pools, ring slots, decode
// buffers, the sparse hot-page cache — holds the paged cache's elements, fp8 codes with their rows' f32 scales
// beside them; each copy of token rows moves the scales of the same rows too.
//
// Sparse decode (config.sparse.policy not full; offload_sparse_attention.h): no whole-layer loads. The
// policy keeps its page summaries on the GPU (Quest: key min/max, updated by prefill and decode), selects per KV head,
// and only the selected pages of [0, F) reach the layer buffer: from the lane's GPU cache of recently
// selected pages or, read by a gather kernel through the pinned pool's mapped pointers, over PCIe. The
// decode buffer [F, n) is copied in as above; the selected pages are attended with the exact softmax.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "nanovllm/core/tensor.h"
#include "nanovllm/engine/config.h"
#include "nanovllm/engine/scheduler_output.h"
#include "nanovllm/model/decoder.h"
#include "nanovllm/offload/offload_device.h"
#include "nanovllm/offload/offload_host_pool.h"
#include "nanovllm/offload/offload_sparse_attention.h"
#include "nanovllm/sparse/attention_policy_chain.h"

namespace nanovllm {

struct OffloadStats {
  int64_t prefills = 0, prefill_tokens = 0, decode_steps = 0;
  int64_t decode_tokens = 0;             // decode rows over all steps (a batched step has several)
  int64_t h2d_bytes = 0, d2h_bytes = 0;  // host pool <-> device KV bytes issued since construction
  int64_t last_step_h2d_bytes = 0, last_step_d2h_bytes = 0;
  double host_alloc_s = 0;               // allocating (pinning) the host pools
};

// Device memory the offload path holds, by term (the peak-memory formula).
struct OffloadFootprint {
  size_t ring = 0;            // num_kv_buffers x 2 x capacity x Hk x D
  size_t decode_buffers = 0;  // L x 2 x offload.block_size x Hk x D
  size_t hidden = 0;          // hidden + residual [max_model_len, H]
  size_t metadata = 0;        // index arrays
  size_t sparse = 0;          // sparse decode: page min/max of every layer + the hot-page cache
  size_t total() const { return ring + decode_buffers + hidden + metadata + sparse; }
};

class OffloadRunner {
 public:
  // Samples rows [0, seqs.size()) of device logits [S, V] f32 (the backend runner's sampler); with tensor
  // parallel only the first rank samples, the others return nothing.
  using SampleFn = std::function<std::vector<SampledToken>(const std::vector<const Sequence*>& seqs, float* logits)>;

  // Reads config.offload and config.model.max_model_len (longest sequence: sizes the layer buffers and
  // the prefill hidden state). `ws` is the backend runner's workspace (shared: the lanes run one after
  // the other on one stream); its rows are the prefill chunk, its logits rows >= offload.max_num_seqs.
  OffloadRunner(const Decoder& model, std::unique_ptr<OffloadDevice> device, const EngineConfig& config,
             const DecoderWorkspace& ws, SampleFn sample);
  ~OffloadRunner();
  OffloadRunner(const OffloadRunner&) = delete;
  OffloadRunner& operator=(const OffloadRunner&) = delete;

  // One step of the offloaded sequences: the whole prompt of each admitted one (num_computed_tokens == 0)
  // and one decode token of each other; returns the sampled tokens in `out` order.
  std::vector<SampledToken> execute(const SchedulerOutput& out);

  // Host KV bytes for a sequence of `tokens` tokens (rounded up to host blocks, all layers, K and V) in
  // this runner's pool (with tensor parallel: this rank's KV heads).
  int64_t host_bytes_for(int64_t tokens) const;
  // Throws nanovllm::Error when such a sequence would exceed cpu_memory_limit or the available memory, for
  // the pools of every tensor-parallel rank of this host together (each holds its own KV heads' pool). The
  // pools of the other busy lanes stay; a free lane's pool is reused or replaced.
  void check_host_memory(int64_t tokens) const;

  const OffloadConfig& config() const { return cfg_; }
  const OffloadStats& stats() const { return stats_; }
  OffloadFootprint footprint() const { return footprint_; }
  int64_t kv_bytes_per_token_per_layer() const { return 2 * (token_bytes_ + scale_bytes_); }  // K + V
  int64_t num_lanes() const { return static_cast<int64_t>(lanes_.size()); }
  OffloadDevice& device() { return *dev_; }
  // Sparse decode only (nullptr otherwise): its policy counters and hot-page cache hits since construction.
  const OffloadSparseAttention* sparse() const { return sparse_.get(); }
  PageCacheCounters sparse_cache_counters() const;
  // Layer taps for the steps run from now on (ModelRunner::set_layer_taps); nullptr: none.
  void set_layer_taps(LayerTaps* taps) { taps_ = taps; }
  // The sparse prefill policy the prefill's chunks go through (sparse/sparse_prefill_attention.h), after the
  // sparse decode policy's page metadata update when there is one; nullptr: dense. Decode steps never use it.
  void set_prefill_policy(AttentionPolicy* policy);

 private:
  // Token-major K (or V) rows in the cache's format: elements [tokens, Hk, D] and (fp8) scales [tokens, Hk] f32.
  struct KvRows {
    char* data = nullptr;
    char* scale = nullptr;  // nullptr without scales
  };
  struct Slot {
    KvRows k;  // [lanes x capacity, Hk, D]
    KvRows v;  // [lanes x capacity, Hk, D]
  };
  // One offloaded sequence's place: its host pool and where it stands. seq_id -1: free.
  struct Lane {
    int64_t seq_id = -1;
    int64_t len = 0;       // tokens whose K/V exist (host pool [0, F) + decode buffers [F, len))
    int64_t flushed = 0;   // F
    int64_t capacity = 0;  // tokens this sequence may reach (host pool reserved for it)
    std::unique_ptr<OffloadHostPool> host;
  };
  void release_finished(const SchedulerOutput& out);  // frees the lanes of sequences `out` no longer lists
  int64_t take_lane(const Sequence& seq);  // a free lane for a new sequence
  int64_t lane_of(const Sequence& seq) const;  // the lane a decoding sequence holds (checks its progress)
  void prefill(int64_t lane, const Sequence& seq, int64_t num_tokens);
  void decode(const std::vector<const Sequence*>& seqs, const std::vector<int64_t>& lanes);
  // Each of `lanes`' host pool [0, F) of `layer` -> its region of the layer's ring slot, on the slot's queue.
  void issue_load(int64_t layer, const std::vector<int64_t>& lanes);
  void flush_decode_buffers(int64_t lane, int64_t end);  // its decode buffers [0, end - F) -> host pool [F, end)
  KvRows lane_rows(const KvRows& slot, int64_t lane) const;  // the lane's region of a slot's K (or V)
  KvRows decode_buffer(int64_t lane, int64_t layer, bool value) const;  // [offload.block_size, Hk, D]
  KvRows host_rows(const OffloadHostPool& host, int64_t layer, bool value) const;  // [capacity, Hk, D]
  KvRows at(const KvRows& rows, int64_t token) const;  // the rows from `token` on
  // Rows [0, tokens) of src -> dst (and their scales), on queue q.
  void copy_rows(const KvRows& dst, const KvRows& src, int64_t tokens, CopyKind kind, OffloadDevice::Queue q,
                 const char* what);
  // Rows [0, tokens) of src -> dst (and their scales) as copies of a copy_batch_d2d.
  void add_copy(std::vector<ops::ByteCopy>& copies, const KvRows& dst, const KvRows& src, int64_t tokens) const;
  void note_rows(const KvRows& rows, int64_t tokens, bool write, OffloadDevice::Queue q, const char* what);
  // The sparse fetch's head-major copy of `rows`' scales (device [tokens, Hk]) into the host pool's layer from
  // token `start` (scales_by_head_ only), on the compute queue: the fetch reads it there.
  void store_scales_by_head(const OffloadHostPool& host, int64_t layer, bool value, const KvRows& rows, int64_t tokens,
                            int64_t start);
  LayerKvCache slot_cache(int64_t s) const;  // the slot as a paged cache [lanes x capacity / kViewBlock, kViewBlock, Hk, D]
  TensorView index_view(int64_t offset, int64_t n) const;  // iota_[offset, offset + n) as [n] i32
  TensorView device_ints(int64_t offset, int64_t n) const;  // meta_dev_[offset, offset + n) as [n] i32
  AttentionMetadata prefill_attention(int64_t lane, int64_t start, int64_t query_len, TensorView cu,
                                      TensorView ctx) const;
  void upload_ints(const int32_t* data, int64_t n);  // -> meta_dev_[0, n), on the compute queue
  void check_pool(int64_t tokens, int64_t ranks) const;  // check_host_memory for `ranks` pools like this one
  int64_t largest_free_lane() const;  // the free lane with the largest pool; -1 when none is free

  const Decoder& model_;
  std::unique_ptr<OffloadDevice> dev_;
  OffloadConfig cfg_;
  int64_t max_model_len_ = 0;  // the engine's: the longest sequence
  int64_t host_ranks_ = 1;     // this host's tensor-parallel ranks, each with pools like these
  DecoderWorkspace ws_;
  SampleFn sample_;
  int64_t num_layers_ = 0, num_slots_ = 0, chunk_ = 0, capacity_ = 0;
  int64_t token_bytes_ = 0;  // one token of one layer's K: Hk * D * element size
  int64_t scale_bytes_ = 0;  // its scales: Hk * 4 in an fp8 cache, else 0
  bool scales_by_head_ = false;  // the host pools keep head-major scales for the sparse fetch (fp8 sparse decode)
  DType kv_dtype_;           // the cache's elements (cache.kv_dtype of the activations)
  int64_t page_size_ = 0;    // tokens of a sparse decode page
  DType act_;

  Buffer ring_;            // [num_slots, 2, lanes x capacity, Hk, D] device (fp8: then the scales [..., Hk])
  Buffer decode_buf_;      // [lanes, L, 2, offload.block_size, Hk, D] device
  Buffer decode_scale_;    // [lanes, L, 2, offload.block_size, Hk] f32 device (fp8 only)
  Buffer hidden_, residual_;  // [max_model_len, H] device
  Buffer iota_;            // [lanes x capacity + 2] i32 device: 0, 1, 2, ... (positions, slots, block tables)
  Buffer meta_dev_;        // i32 device: a step's inputs (ids, per-chunk cu/ctx/sample row; decode tables)
  Buffer meta_host_;       // its host staging
  std::vector<Slot> slots_;
  std::vector<Lane> lanes_;  // [offload.max_num_seqs]
  std::unique_ptr<OffloadSparseAttention> sparse_;  // config.sparse.policy not full; nullptr: dense decode
  OffloadFootprint footprint_;

  OffloadDevice::Queue d2h_q_ = 0;
  std::vector<OffloadDevice::Queue> load_q_;     // [num_slots]
  std::vector<OffloadDevice::Event> slot_loaded_, slot_computed_, slot_drained_;  // [num_slots]
  // [L]: the layer's host regions are written. Every D2H runs in order on d2h_q_, so the latest record
  // covers every lane's earlier writes.
  std::vector<OffloadDevice::Event> host_ready_;
  OffloadDevice::Event flush_done_ = 0, decode_written_ = 0;

  OffloadStats stats_;
  LayerTaps* taps_ = nullptr;
  std::unique_ptr<AttentionPolicyChain> prefill_chain_;  // sparse_, then the sparse prefill policy
  AttentionPolicy* prefill_attention_ = nullptr;          // what the prefill's chunks use (nullptr: dense)
};

}  // namespace nanovllm
