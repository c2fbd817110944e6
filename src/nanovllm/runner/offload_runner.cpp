#include "nanovllm/runner/offload_runner.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"

namespace nanovllm {
namespace {

// Block size of the paged view of a layer buffer: a contiguous buffer is a paged cache whose block
// table is 0, 1, 2, ...; any size works, this keeps the tables short at 1M tokens (4096 entries).
constexpr int64_t kViewBlock = 256;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
double gib(double bytes) { return bytes / (1 << 30); }

}  // namespace

OffloadRunner::OffloadRunner(const Qwen3Model& model, std::unique_ptr<OffloadDevice> device, const EngineConfig& config,
                             const DecoderWorkspace& ws, SampleFn sample)
    : model_(model),
      dev_(std::move(device)),
      cfg_(config.offload),
      max_model_len_(config.model.max_model_len),
      host_ranks_(config.parallel.ranks_per_node()),
      ws_(ws),
      sample_(std::move(sample)),
      host_(dev_->host_allocator(), model.num_layers(),
            model.config().num_key_value_heads * model.config().head_dim *
                static_cast<int64_t>(dtype_size(model.activation_dtype()))) {
  const ModelConfig& c = model.config();
  num_layers_ = model.num_layers();
  num_slots_ = std::min(cfg_.num_kv_buffers, num_layers_);  // more slots than layers never fill
  act_ = model.activation_dtype();
  token_bytes_ = c.num_key_value_heads * c.head_dim * static_cast<int64_t>(dtype_size(act_));
  chunk_ = ws_.hidden.dim(0);
  NANOVLLM_CHECK(chunk_ >= 1 && ws_.logits.dim(0) >= 1, "offload: the runner workspace has no rows");
  const bool sparse = config.sparse.policy == SparsePolicy::kQuest;
  const int64_t page = config.cache.block_size;  // a Quest page (sparse decode)
  // The buffers must hold whole view blocks and, for sparse decode, whole pages.
  capacity_ = round_up(max_model_len_, sparse ? std::lcm(kViewBlock, page) : kViewBlock);
  const Device dev = dev_->device();
  Allocator& da = dev_->device_allocator();

  // Device buffers, all allocated once: the ring, the decode buffers, the prefill hidden state.
  const size_t tb = static_cast<size_t>(token_bytes_);
  ring_ = Buffer(da, static_cast<size_t>(num_slots_) * 2 * static_cast<size_t>(capacity_) * tb);
  for (int64_t s = 0; s < num_slots_; ++s) {
    char* k = static_cast<char*>(ring_.data()) + static_cast<size_t>(2 * s * capacity_) * tb;
    slots_.push_back({k, k + static_cast<size_t>(capacity_) * tb});
  }
  decode_buf_ = Buffer(da, static_cast<size_t>(num_layers_) * 2 * static_cast<size_t>(cfg_.block_size) * tb);
  hidden_ = Buffer(da, act_, Shape{max_model_len_, c.hidden_size});
  residual_ = Buffer(da, act_, Shape{max_model_len_, c.hidden_size});
  const int64_t meta_ints = max_model_len_ + 4 * ceil_div(max_model_len_, chunk_) + 8;
  iota_ = Buffer(da, DType::kI32, Shape{capacity_ + 2});
  meta_dev_ = Buffer(da, DType::kI32, Shape{std::max(meta_ints, capacity_ + 2)});
  meta_host_ = Buffer(dev_->host_allocator(), DType::kI32, Shape{std::max(meta_ints, capacity_ + 2)});
  (void)dev;
  if (sparse) {
    const int64_t pages = capacity_ / page;
    const QuestShape shape{.num_layers = num_layers_,
                           .num_blocks = pages,
                           .block_size = page,
                           .num_kv_heads = c.num_key_value_heads,
                           .num_query_heads = c.num_attention_heads,
                           .head_dim = c.head_dim,
                           .kv_dtype = act_,
                           .max_num_seqs = 1,
                           .max_blocks_per_seq = pages};
    sparse_ = std::make_unique<OffloadSparseAttention>(
        shape, config.sparse.budget_pages(page), SparseConfig::kSinkPages, SparseConfig::kRecentPages,
        config.sparse.cache_tokens(), iota_.view(), host_, da);
    footprint_.sparse = sparse_->device_bytes();
    prefill_attention_ = sparse_.get();  // sparse decode: fills the page metadata, attends densely
  }

  footprint_.ring = ring_.nbytes();
  footprint_.decode_buffers = decode_buf_.nbytes();
  footprint_.hidden = hidden_.nbytes() + residual_.nbytes();
  footprint_.metadata = iota_.nbytes() + meta_dev_.nbytes();

  d2h_q_ = dev_->create_queue();
  for (int64_t s = 0; s < num_slots_; ++s) {
    load_q_.push_back(dev_->create_queue());
    slot_loaded_.push_back(dev_->create_event());
    slot_computed_.push_back(dev_->create_event());
    slot_drained_.push_back(dev_->create_event());
  }
  for (int64_t l = 0; l < num_layers_; ++l) host_ready_.push_back(dev_->create_event());
  flush_done_ = dev_->create_event();
  decode_written_ = dev_->create_event();

  // iota: positions, slot mappings and identity block tables are all views of it.
  int32_t* h = meta_host_.view().data_as<int32_t>();
  for (int64_t i = 0; i < capacity_ + 2; ++i) h[i] = static_cast<int32_t>(i);
  dev_->copy(iota_.data(), h, static_cast<size_t>(capacity_ + 2) * 4, CopyKind::kH2D, OffloadDevice::kCompute,
             "iota upload");
  dev_->synchronize();  // once, at construction: the staging buffer is reused by every step
  NANOVLLM_INFO("cpu offload: ", num_slots_, " layer buffers of ", capacity_, " tokens (", gib(footprint_.ring),
                " GiB), decode buffers ", gib(footprint_.decode_buffers), " GiB, prefill hidden state ",
                gib(footprint_.hidden), " GiB, prefill chunk ", chunk_, " tokens",
                sparse ? detail::concat(", sparse decode (page min/max + hot-page cache) ", gib(footprint_.sparse), " GiB")
                       : std::string());
}

void OffloadRunner::set_prefill_policy(AttentionPolicy* policy) {
  prefill_chain_.reset();
  prefill_attention_ = sparse_.get();
  if (policy == nullptr) return;
  if (sparse_ == nullptr) {
    prefill_attention_ = policy;
    return;
  }
  prefill_chain_ = std::make_unique<AttentionPolicyChain>(std::vector<AttentionPolicy*>{sparse_.get(), policy});
  prefill_attention_ = prefill_chain_.get();
}

OffloadRunner::~OffloadRunner() {
  if (dev_) dev_->synchronize();
}

int64_t OffloadRunner::host_bytes_for(int64_t tokens) const {
  return static_cast<int64_t>(
      OffloadHostPool::bytes_for(num_layers_, token_bytes_, round_up(std::max<int64_t>(tokens, 1), cfg_.block_size)));
}

void OffloadRunner::check_host_memory(int64_t tokens) const { check_pool(tokens, host_ranks_); }

void OffloadRunner::check_pool(int64_t tokens, int64_t ranks) const {
  const int64_t need = ranks * host_bytes_for(tokens);
  const auto explain = [&] {
    return detail::concat(tokens, " tokens x ", num_layers_, " layers x ", 2 * token_bytes_,
                          " bytes of K+V per token", ranks > 1 ? detail::concat(" x ", ranks, " ranks") : "");
  };
  NANOVLLM_CHECK(cfg_.cpu_memory_limit == 0 || need <= cfg_.cpu_memory_limit, "the request needs ", gib(need),
                 " GiB of host KV cache (", explain(), "), more than cpu_memory_limit = ", gib(cfg_.cpu_memory_limit),
                 " GiB; shorten the prompt or max_tokens, or raise --cpu-memory-limit");
  const int64_t available = available_host_memory_bytes();
  if (available < 0) return;
  // The pool this runner already holds is reused (or freed before growing).
  const int64_t usable = available + static_cast<int64_t>(host_.bytes());
  NANOVLLM_CHECK(need <= usable, "the request needs ", gib(need), " GiB of pinned host KV cache (", explain(),
                 "), but the machine has only ", gib(usable), " GiB of memory available");
}

TensorView OffloadRunner::index_view(int64_t offset, int64_t n) const {
  NANOVLLM_ASSERT(offset >= 0 && offset + n <= capacity_ + 2);
  return TensorView(static_cast<int32_t*>(iota_.data()) + offset, DType::kI32, Shape{n}, dev_->device());
}

LayerKvCache OffloadRunner::slot_cache(int64_t s) const {
  const ModelConfig& c = model_.config();
  const Shape shape{capacity_ / kViewBlock, kViewBlock, c.num_key_value_heads, c.head_dim};
  const Slot& slot = slots_[static_cast<size_t>(s)];
  return {TensorView(slot.k, act_, shape, dev_->device()), TensorView(slot.v, act_, shape, dev_->device())};
}

AttentionMetadata OffloadRunner::attention(int64_t start, int64_t query_len, TensorView cu, TensorView ctx) const {
  AttentionMetadata a;
  a.num_seqs = 1;
  a.num_tokens = query_len;
  a.max_query_len = query_len;
  a.max_context_len = start + query_len;
  a.cu_seqlens_q = cu;      // [2]: {0, query_len}
  a.context_lens = ctx;     // [1]: {start + query_len}
  const int64_t blocks = ceil_div(start + query_len, kViewBlock);
  a.block_tables = index_view(0, blocks).reshape({1, blocks});  // identity: the buffer in order
  a.slot_mapping = index_view(start, query_len);              // token at position p goes to slot p
  a.block_size = kViewBlock;
  return a;
}

void OffloadRunner::upload_ints(const int32_t* data, int64_t n) {
  // The staging buffer is free: every step ends with the sampler's wait on the compute queue.
  dev_->copy(meta_dev_.data(), data, static_cast<size_t>(n) * 4, CopyKind::kH2D, OffloadDevice::kCompute,
             "step inputs upload");
}

std::vector<SampledToken> OffloadRunner::execute(const SchedulerOutput& out) {
  NANOVLLM_CHECK(out.seqs.size() == 1, "the offload runner runs one sequence per step, got ", out.seqs.size());
  const ScheduledSequence& sch = out.seqs[0];
  const Sequence& seq = *sch.seq;
  NANOVLLM_CHECK(sch.sample, "offload: request ", seq.seq_id, " must sample every step (whole-prompt prefill)");
  if (seq.num_computed_tokens == 0) {
    NANOVLLM_CHECK(sch.num_new_tokens == seq.num_tokens(), "offload: request ", seq.seq_id,
                   " must prefill its whole prompt in one step (", seq.num_tokens(), " tokens), got ",
                   sch.num_new_tokens);
    prefill(seq, sch.num_new_tokens);
  } else {
    NANOVLLM_CHECK(seq.seq_id == seq_id_ && seq.num_computed_tokens == len_ && sch.num_new_tokens == 1 &&
                       seq.num_tokens() == len_ + 1,
                   "offload: decode step of request ", seq.seq_id, " at ", seq.num_computed_tokens,
                   " tokens, but the host pool holds request ", seq_id_, " at ", len_, " tokens");
    decode(seq);
  }
  return sample_({&seq}, ws_.logits.data_as<float>());
}

void OffloadRunner::prefill(const Sequence& seq, int64_t num_tokens) {
  const int64_t T = num_tokens;
  NANOVLLM_CHECK(T >= 1 && T < max_model_len_, "offload: prompt of ", T, " tokens; max_model_len is ",
                 max_model_len_);
  const size_t tb = static_cast<size_t>(token_bytes_);
  const OffloadDevice::Queue compute = OffloadDevice::kCompute;
  const ops::Stream st = dev_->compute_stream();
  const Device device = dev_->device();

  // A new sequence: nothing of the previous one is read again (its host pool contents are overwritten
  // before any load reads them, and the ring and decode buffers are rewritten before they are read).
  seq_id_ = seq.seq_id;
  len_ = flushed_ = 0;
  const int64_t reach = std::min(max_model_len_, std::max(seq.num_prompt_tokens + seq.params.max_tokens, T + 1));
  seq_capacity_ = round_up(reach, cfg_.block_size);
  if (seq_capacity_ > host_.capacity()) {
    check_pool(reach, 1);  // this rank's pool (the engine checked the whole group's before admitting it)
    dev_->synchronize();  // no queue may still touch the old regions
    stats_.host_alloc_s += host_.reserve(seq_capacity_);
  }

  // Inputs: ids [T], then per chunk c {0, len_c} (cu_seqlens), {start_c + len_c} (context), {len_c - 1}
  // (the sampled row).
  const int64_t num_chunks = ceil_div(T, chunk_);
  int32_t* h = meta_host_.view().data_as<int32_t>();
  std::copy(seq.token_ids.begin(), seq.token_ids.begin() + T, h);
  for (int64_t c = 0; c < num_chunks; ++c) {
    const int64_t start = c * chunk_, n = std::min(chunk_, T - start);
    int32_t* m = h + T + 4 * c;
    m[0] = 0;
    m[1] = static_cast<int32_t>(n);
    m[2] = static_cast<int32_t>(start + n);
    m[3] = static_cast<int32_t>(n - 1);
  }
  upload_ints(h, T + 4 * num_chunks);
  const int32_t* md = meta_dev_.view().data_as<const int32_t>();
  auto ints = [&](int64_t offset, int64_t n) {
    return TensorView(const_cast<int32_t*>(md) + offset, DType::kI32, Shape{n}, device);
  };
  auto chunk_inputs = [&](int64_t c) {
    const int64_t start = c * chunk_, n = std::min(chunk_, T - start);
    DecoderInputs in;
    in.input_ids = ints(start, n);
    in.positions = index_view(start, n);
    in.sample_rows = ints(T + 4 * c + 3, 1);
    in.attn = attention(start, n, ints(T + 4 * c, 2), ints(T + 4 * c + 2, 1));
    in.taps = taps_;
    in.attention_policy = prefill_attention_;  // sparse decode's page metadata, then sparse prefill
    return in;
  };
  auto chunk_workspace = [&](int64_t c) {  // hidden/residual rows of the chunk; the rest is the shared workspace
    const int64_t start = c * chunk_, n = std::min(chunk_, T - start);
    DecoderWorkspace w = ws_;
    w.hidden = hidden_.view().slice_rows(start, start + n);      // [n, H]
    w.residual = residual_.view().slice_rows(start, start + n);  // [n, H]
    return w;
  };

  if (sparse_) sparse_->begin_sequence(st);
  for (int64_t c = 0; c < num_chunks; ++c) model_.embed(chunk_inputs(c), chunk_workspace(c), st);
  for (int64_t l = 0; l < num_layers_; ++l) {
    const int64_t s = l % num_slots_;
    const Slot& slot = slots_[static_cast<size_t>(s)];
    // The slot's previous D2H (layer l - num_slots) has read it; no load is writing it.
    dev_->wait(compute, slot_drained_[static_cast<size_t>(s)]);
    dev_->wait(compute, slot_loaded_[static_cast<size_t>(s)]);
    dev_->note_access(slot.k, static_cast<size_t>(T) * tb, true, compute, "prefill layer K (qkv prologue + attention)");
    dev_->note_access(slot.v, static_cast<size_t>(T) * tb, true, compute, "prefill layer V (qkv prologue + attention)");
    for (int64_t c = 0; c < num_chunks; ++c) model_.layer(l, chunk_inputs(c), slot_cache(s), chunk_workspace(c), st);
    dev_->record(slot_computed_[static_cast<size_t>(s)], compute);

    // The layer's K/V [0, T) to the host pool, overlapped with the next layers' compute.
    dev_->wait(d2h_q_, slot_computed_[static_cast<size_t>(s)]);
    dev_->copy(host_.k(l), slot.k, static_cast<size_t>(T) * tb, CopyKind::kD2H, d2h_q_, "prefill K layer -> host pool");
    dev_->copy(host_.v(l), slot.v, static_cast<size_t>(T) * tb, CopyKind::kD2H, d2h_q_, "prefill V layer -> host pool");
    dev_->record(slot_drained_[static_cast<size_t>(s)], d2h_q_);
    dev_->record(host_ready_[static_cast<size_t>(l)], d2h_q_);
  }
  model_.head(chunk_inputs(num_chunks - 1), chunk_workspace(num_chunks - 1), st);

  len_ = flushed_ = T;  // the partial last host block stays in the pool; decode appends after it
  const int64_t d2h = 2 * T * token_bytes_ * num_layers_;
  stats_.prefills += 1;
  stats_.prefill_tokens += T;
  stats_.d2h_bytes += d2h;
  stats_.last_step_d2h_bytes = d2h;
  stats_.last_step_h2d_bytes = 0;
}

void OffloadRunner::issue_load(int64_t layer) {
  const int64_t s = layer % num_slots_;
  const OffloadDevice::Queue q = load_q_[static_cast<size_t>(s)];
  const Slot& slot = slots_[static_cast<size_t>(s)];
  const size_t bytes = static_cast<size_t>(flushed_ * token_bytes_);
  dev_->wait(q, slot_computed_[static_cast<size_t>(s)]);  // the layer that used the slot before is done
  dev_->wait(q, slot_drained_[static_cast<size_t>(s)]);   // a prefill D2H from the slot has read it
  dev_->wait(q, host_ready_[static_cast<size_t>(layer)]);  // the layer's host region is fully written
  dev_->copy(slot.k, host_.k(layer), bytes, CopyKind::kH2D, q, "load K host pool -> layer buffer");
  dev_->copy(slot.v, host_.v(layer), bytes, CopyKind::kH2D, q, "load V host pool -> layer buffer");
  dev_->record(slot_loaded_[static_cast<size_t>(s)], q);
  stats_.h2d_bytes += 2 * static_cast<int64_t>(bytes);
  stats_.last_step_h2d_bytes += 2 * static_cast<int64_t>(bytes);
}

void OffloadRunner::decode(const Sequence& seq) {
  const int64_t n = len_;            // position of the new token
  const int64_t m = n - flushed_;    // tokens in the decode buffers
  NANOVLLM_ASSERT(n + 1 <= seq_capacity_ && m + 1 <= cfg_.block_size);
  const size_t tb = static_cast<size_t>(token_bytes_);
  const OffloadDevice::Queue compute = OffloadDevice::kCompute;
  const ops::Stream st = dev_->compute_stream();
  stats_.last_step_h2d_bytes = stats_.last_step_d2h_bytes = 0;

  int32_t* h = meta_host_.view().data_as<int32_t>();
  h[0] = seq.token_ids[static_cast<size_t>(n)];
  upload_ints(h, 1);
  DecoderInputs in;
  in.input_ids = TensorView(meta_dev_.data(), DType::kI32, Shape{1}, dev_->device());
  in.positions = index_view(n, 1);
  in.sample_rows = index_view(0, 1);
  in.attn = attention(n, 1, index_view(0, 2), index_view(n + 1, 1));
  in.taps = taps_;
  in.attention_policy = sparse_.get();

  dev_->wait(compute, flush_done_);  // the decode buffers' last flush has read them
  if (sparse_) {
    sparse_->begin_step(flushed_);
  } else {
    for (int64_t l = 0; l < num_slots_; ++l) issue_load(l);
  }
  model_.embed(in, ws_, st);
  for (int64_t l = 0; l < num_layers_; ++l) {
    const int64_t s = l % num_slots_;
    const Slot& slot = slots_[static_cast<size_t>(s)];
    char* dk = static_cast<char*>(decode_buf_.data()) + static_cast<size_t>(2 * l * cfg_.block_size) * tb;
    char* dv = dk + static_cast<size_t>(cfg_.block_size) * tb;
    if (sparse_) {  // the selected pages of [0, F) are read from the host pool inside the layer
      dev_->wait(compute, slot_drained_[static_cast<size_t>(s)]);  // a prefill D2H from the slot has read it
      dev_->wait(compute, host_ready_[static_cast<size_t>(l)]);    // the layer's host region is written
      dev_->note_access(host_.k(l), static_cast<size_t>(flushed_) * tb, false, compute, "sparse fetch host K");
      dev_->note_access(host_.v(l), static_cast<size_t>(flushed_) * tb, false, compute, "sparse fetch host V");
    } else {
      dev_->wait(compute, slot_loaded_[static_cast<size_t>(s)]);
    }
    // Slot = [host prefix 0..F) | decode buffer F..n) | new token n].
    dev_->copy(slot.k + static_cast<size_t>(flushed_) * tb, dk, static_cast<size_t>(m) * tb, CopyKind::kD2D, compute,
               "decode buffer K -> layer buffer");
    dev_->copy(slot.v + static_cast<size_t>(flushed_) * tb, dv, static_cast<size_t>(m) * tb, CopyKind::kD2D, compute,
               "decode buffer V -> layer buffer");
    dev_->note_access(slot.k, static_cast<size_t>(n + 1) * tb, true, compute, "decode layer K (prologue + attention)");
    dev_->note_access(slot.v, static_cast<size_t>(n + 1) * tb, true, compute, "decode layer V (prologue + attention)");
    model_.layer(l, in, slot_cache(s), ws_, st);
    dev_->copy(dk + static_cast<size_t>(m) * tb, slot.k + static_cast<size_t>(n) * tb, tb, CopyKind::kD2D, compute,
               "new token K -> decode buffer");
    dev_->copy(dv + static_cast<size_t>(m) * tb, slot.v + static_cast<size_t>(n) * tb, tb, CopyKind::kD2D, compute,
               "new token V -> decode buffer");
    dev_->record(slot_computed_[static_cast<size_t>(s)], compute);
    if (!sparse_ && l + num_slots_ < num_layers_) issue_load(l + num_slots_);
  }
  model_.head(in, ws_, st);
  len_ = n + 1;
  if (len_ % cfg_.block_size == 0) flush_decode_buffers(len_);
  stats_.decode_steps += 1;
}

PageCacheCounters OffloadRunner::sparse_cache_counters() const {
  return sparse_ ? sparse_->cache_counters(dev_->compute_stream()) : PageCacheCounters{};
}

void OffloadRunner::flush_decode_buffers(int64_t end) {
  const size_t tb = static_cast<size_t>(token_bytes_);
  const int64_t count = end - flushed_;
  dev_->record(decode_written_, OffloadDevice::kCompute);
  dev_->wait(d2h_q_, decode_written_);
  for (int64_t l = 0; l < num_layers_; ++l) {
    const char* dk = static_cast<const char*>(decode_buf_.data()) + static_cast<size_t>(2 * l * cfg_.block_size) * tb;
    const char* dv = dk + static_cast<size_t>(cfg_.block_size) * tb;
    dev_->copy(host_.k(l) + static_cast<size_t>(flushed_) * tb, dk, static_cast<size_t>(count) * tb, CopyKind::kD2H,
               d2h_q_, "flush decode buffer K -> host pool");
    dev_->copy(host_.v(l) + static_cast<size_t>(flushed_) * tb, dv, static_cast<size_t>(count) * tb, CopyKind::kD2H,
               d2h_q_, "flush decode buffer V -> host pool");
    dev_->record(host_ready_[static_cast<size_t>(l)], d2h_q_);
  }
  dev_->record(flush_done_, d2h_q_);
  flushed_ = end;
  const int64_t bytes = 2 * count * token_bytes_ * num_layers_;
  stats_.d2h_bytes += bytes;
  stats_.last_step_d2h_bytes += bytes;
}

}  // namespace nanovllm
