#include "nanovllm/offload/offload_runner.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"
#include "nanovllm/kernels/page_cache_ops.h"
#include "nanovllm/sparse/policies.h"

namespace nanovllm {
namespace {

// Block size of the paged view of a layer buffer: a contiguous buffer is a paged cache whose block
// table is 0, 1, 2, ...; any size works, this keeps the tables short at 1M tokens (4096 entries).
constexpr int64_t kViewBlock = 256;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
double gib(double bytes) { return bytes / (1 << 30); }

}  // namespace

OffloadRunner::OffloadRunner(const Decoder& model, std::unique_ptr<OffloadDevice> device, const EngineConfig& config,
                          const DecoderWorkspace& ws, SampleFn sample)
    : model_(model),
      dev_(std::move(device)),
      cfg_(config.offload),
      max_model_len_(config.model.max_model_len),
      host_ranks_(config.parallel.ranks_per_node()),
      ws_(ws),
      sample_(std::move(sample)) {
  const ModelConfig& c = model.config();
  num_layers_ = model.num_layers();
  num_slots_ = std::min(cfg_.num_kv_buffers, num_layers_);  // more slots than layers never fill
  act_ = model.activation_dtype();
  kv_dtype_ = config.cache.kv_dtype(act_);
  token_bytes_ = c.num_key_value_heads * c.head_dim * static_cast<int64_t>(dtype_size(kv_dtype_));
  scale_bytes_ = kv_dtype_ == DType::kF8E4M3 ? c.num_key_value_heads * 4 : 0;
  chunk_ = ws_.hidden.dim(0);
  const int64_t lanes = cfg_.max_num_seqs;
  NANOVLLM_CHECK(chunk_ >= 1 && ws_.logits.dim(0) >= lanes, "offload: the runner workspace has ", chunk_,
                 " rows and ", ws_.logits.dim(0), " logits rows; ", lanes, " offloaded sequences need as many");
  const bool sparse = config.sparse.enabled();
  scales_by_head_ = sparse && scale_bytes_ > 0;
  page_size_ = config.cache.block_size;  // a page of sparse decode
  // The buffers must hold whole view blocks and, for sparse decode, whole pages.
  capacity_ = round_up(max_model_len_, sparse ? std::lcm(kViewBlock, page_size_) : kViewBlock);
  Allocator& da = dev_->device_allocator();
  for (int64_t i = 0; i < lanes; ++i) {
    Lane lane;
    lane.host = std::make_unique<OffloadHostPool>(dev_->host_allocator(), num_layers_, token_bytes_, scale_bytes_,
                                                  scales_by_head_);
    lanes_.push_back(std::move(lane));
  }

  // Device buffers, all allocated once: the ring, the decode buffers, the prefill hidden state.
  // A slot's K (or V) is one region of the paged cache's format (kv_cache_region: elements, then scales).
  const int64_t slot_rows = lanes * capacity_ * c.num_key_value_heads;
  const size_t region = kv_cache_region_bytes(kv_dtype_, slot_rows, c.head_dim);
  const size_t scales_at = kv_cache_region_bytes(DType::kU8, slot_rows, c.head_dim);  // the elements, aligned
  ring_ = Buffer(da, static_cast<size_t>(num_slots_) * 2 * region);
  for (int64_t s = 0; s < num_slots_; ++s) {
    char* k = static_cast<char*>(ring_.data()) + static_cast<size_t>(2 * s) * region;
    char* v = k + region;
    slots_.push_back({{k, scale_bytes_ ? k + scales_at : nullptr}, {v, scale_bytes_ ? v + scales_at : nullptr}});
  }
  const size_t decode_tokens = static_cast<size_t>(lanes * num_layers_) * 2 * static_cast<size_t>(cfg_.block_size);
  decode_buf_ = Buffer(da, decode_tokens * static_cast<size_t>(token_bytes_));
  if (scale_bytes_) decode_scale_ = Buffer(da, decode_tokens * static_cast<size_t>(scale_bytes_));
  hidden_ = Buffer(da, act_, Shape{max_model_len_, c.hidden_size});
  residual_ = Buffer(da, act_, Shape{max_model_len_, c.hidden_size});
  // Step inputs: a prefill's ids, per-chunk ints and per-token DCA scale lengths; a decode step's 5 ints per
  // row and its tables (view blocks and, for sparse decode, pages, of every row's lane).
  const int64_t prefill_ints = 2 * max_model_len_ + 4 * ceil_div(max_model_len_, chunk_);
  const int64_t decode_ints = lanes * (5 + capacity_ / kViewBlock + (sparse ? capacity_ / page_size_ : 0));
  const int64_t meta_ints = std::max(prefill_ints, decode_ints) + 8;
  iota_ = Buffer(da, DType::kI32, Shape{lanes * capacity_ + 2});
  meta_dev_ = Buffer(da, DType::kI32, Shape{meta_ints});
  meta_host_ = Buffer(dev_->host_allocator(), DType::kI32, Shape{std::max(meta_ints, lanes * capacity_ + 2)});
  if (sparse) {
    const int64_t pages = capacity_ / page_size_;
    const PagedKvShape shape{.num_layers = num_layers_,
                           .num_blocks = lanes * pages,
                           .block_size = page_size_,
                           .num_kv_heads = c.num_key_value_heads,
                           .num_query_heads = c.num_attention_heads,
                           .head_dim = c.head_dim,
                           .kv_dtype = act_,  // the page metadata's
                           .max_num_seqs = lanes,
                           .max_blocks_per_seq = pages};
    std::vector<const OffloadHostPool*> hosts;
    for (const Lane& lane : lanes_) hosts.push_back(lane.host.get());
    // No more cache than a lane's pages (a short max_model_len), and never less than a selection.
    const int64_t cache_tokens =
        std::min(config.sparse.cache_tokens(), std::max(capacity_, config.sparse.budget_tokens));
    sparse_ = std::make_unique<OffloadSparseAttention>(make_sparse_decode_policy(config.sparse, shape, da),
                                                       cache_tokens, std::move(hosts), kv_dtype_, da,
                                                       dev_->compute_stream());
    const SparseDecodeBytes policy_bytes = sparse_decode_bytes(config.sparse, shape);
    footprint_.sparse = sparse_->device_bytes() + static_cast<size_t>(policy_bytes.per_block * shape.num_blocks +
                                                                      policy_bytes.fixed);
    prefill_attention_ = sparse_.get();  // sparse decode: fills the page metadata, attends densely
  }

  footprint_.ring = ring_.nbytes();
  footprint_.decode_buffers = decode_buf_.nbytes() + decode_scale_.nbytes();
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
  for (int64_t i = 0; i < lanes * capacity_ + 2; ++i) h[i] = static_cast<int32_t>(i);
  dev_->copy(iota_.data(), h, static_cast<size_t>(lanes * capacity_ + 2) * 4, CopyKind::kH2D,
             OffloadDevice::kCompute, "iota upload");
  dev_->synchronize();  // once, at construction: the staging buffer is reused by every step
  NANOVLLM_INFO("cpu offload (", dtype_name(kv_dtype_), " KV): ", lanes,
                lanes == 1 ? " sequence" : " sequences at once", ", ", num_slots_,
                " layer buffers of ", lanes, " x ", capacity_, " tokens (", gib(footprint_.ring), " GiB), decode buffers ",
                gib(footprint_.decode_buffers), " GiB, prefill hidden state ", gib(footprint_.hidden),
                " GiB, prefill chunk ", chunk_, " tokens",
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
      OffloadHostPool::bytes_for(num_layers_, token_bytes_, scale_bytes_,
                                 round_up(std::max<int64_t>(tokens, 1), cfg_.block_size), scales_by_head_));
}

void OffloadRunner::check_host_memory(int64_t tokens) const { check_pool(tokens, host_ranks_); }

int64_t OffloadRunner::largest_free_lane() const {
  int64_t best = -1;
  for (int64_t i = 0; i < num_lanes(); ++i) {
    const Lane& lane = lanes_[static_cast<size_t>(i)];
    if (lane.seq_id < 0 && (best < 0 || lane.host->bytes() > lanes_[static_cast<size_t>(best)].host->bytes())) best = i;
  }
  return best;
}

void OffloadRunner::check_pool(int64_t tokens, int64_t ranks) const {
  const int64_t need = ranks * host_bytes_for(tokens);
  const auto explain = [&] {
    return detail::concat(tokens, " tokens x ", num_layers_, " layers x ", kv_bytes_per_token_per_layer(),
                          " bytes of K+V per token (", dtype_name(kv_dtype_), ")",
                          ranks > 1 ? detail::concat(" x ", ranks, " ranks") : "");
  };
  NANOVLLM_CHECK(cfg_.cpu_memory_limit == 0 || need <= cfg_.cpu_memory_limit, "the request needs ", gib(need),
                 " GiB of host KV cache (", explain(), "), more than cpu_memory_limit = ", gib(cfg_.cpu_memory_limit),
                 " GiB; shorten the prompt or max_tokens, or raise --cpu-memory-limit");
  const int64_t available = available_host_memory_bytes();
  if (available < 0) return;
  // The largest free lane's pool is reused (or freed before growing); the busy lanes' pools stay.
  const int64_t free_lane = largest_free_lane();
  const int64_t reusable = free_lane < 0 ? 0 : static_cast<int64_t>(lanes_[static_cast<size_t>(free_lane)].host->bytes());
  const int64_t usable = available + ranks * reusable;
  NANOVLLM_CHECK(need <= usable, "the request needs ", gib(need), " GiB of pinned host KV cache (", explain(),
                 "), but the machine has only ", gib(usable), " GiB of memory available");
}

TensorView OffloadRunner::index_view(int64_t offset, int64_t n) const {
  NANOVLLM_ASSERT(offset >= 0 && offset + n <= num_lanes() * capacity_ + 2);
  return TensorView(static_cast<int32_t*>(iota_.data()) + offset, DType::kI32, Shape{n}, dev_->device());
}

TensorView OffloadRunner::device_ints(int64_t offset, int64_t n) const {
  return TensorView(static_cast<int32_t*>(meta_dev_.data()) + offset, DType::kI32, Shape{n}, dev_->device());
}

OffloadRunner::KvRows OffloadRunner::at(const KvRows& rows, int64_t token) const {
  return {rows.data + static_cast<size_t>(token * token_bytes_),
          rows.scale ? rows.scale + static_cast<size_t>(token * scale_bytes_) : nullptr};
}

OffloadRunner::KvRows OffloadRunner::lane_rows(const KvRows& slot, int64_t lane) const {
  return at(slot, lane * capacity_);
}

OffloadRunner::KvRows OffloadRunner::decode_buffer(int64_t lane, int64_t layer, bool value) const {
  const int64_t tokens = ((lane * num_layers_ + layer) * 2 + (value ? 1 : 0)) * cfg_.block_size;
  return at({static_cast<char*>(decode_buf_.data()), static_cast<char*>(decode_scale_.data())}, tokens);
}

OffloadRunner::KvRows OffloadRunner::host_rows(const OffloadHostPool& host, int64_t layer, bool value) const {
  return value ? KvRows{host.v(layer), host.v_scale(layer)} : KvRows{host.k(layer), host.k_scale(layer)};
}

void OffloadRunner::copy_rows(const KvRows& dst, const KvRows& src, int64_t tokens, CopyKind kind,
                              OffloadDevice::Queue q, const char* what) {
  dev_->copy(dst.data, src.data, static_cast<size_t>(tokens * token_bytes_), kind, q, what);
  if (scale_bytes_) dev_->copy(dst.scale, src.scale, static_cast<size_t>(tokens * scale_bytes_), kind, q, what);
}

void OffloadRunner::add_copy(std::vector<ops::ByteCopy>& copies, const KvRows& dst, const KvRows& src,
                             int64_t tokens) const {
  copies.push_back({dst.data, src.data, static_cast<size_t>(tokens * token_bytes_)});
  if (scale_bytes_) copies.push_back({dst.scale, src.scale, static_cast<size_t>(tokens * scale_bytes_)});
}

void OffloadRunner::note_rows(const KvRows& rows, int64_t tokens, bool write, OffloadDevice::Queue q,
                              const char* what) {
  dev_->note_access(rows.data, static_cast<size_t>(tokens * token_bytes_), write, q, what);
  if (scale_bytes_) dev_->note_access(rows.scale, static_cast<size_t>(tokens * scale_bytes_), write, q, what);
}

void OffloadRunner::store_scales_by_head(const OffloadHostPool& host, int64_t layer, bool value, const KvRows& rows,
                                         int64_t tokens, int64_t start) {
  if (!scales_by_head_) return;
  const int64_t Hk = scale_bytes_ / 4;
  const TensorView src(rows.scale, DType::kF32, Shape{tokens, Hk}, dev_->device());
  const TensorView dst(value ? host.v_scale_by_head(layer) : host.k_scale_by_head(layer), DType::kF32,
                       Shape{Hk, host.capacity()});
  ops::page_cache_store_scales(dst, src, start, dev_->compute_stream());
}

LayerKvCache OffloadRunner::slot_cache(int64_t s) const {
  const ModelConfig& c = model_.config();
  const Shape shape{num_lanes() * capacity_ / kViewBlock, kViewBlock, c.num_key_value_heads, c.head_dim};
  const Shape rows{shape[0], shape[1], shape[2]};
  const Slot& slot = slots_[static_cast<size_t>(s)];
  const auto view = [&](const KvRows& r) -> KvCacheTensor {
    const TensorView elements(r.data, kv_dtype_, shape, dev_->device());
    if (r.scale == nullptr) return elements;
    return {elements, TensorView(r.scale, DType::kF32, rows, dev_->device())};
  };
  return {view(slot.k), view(slot.v)};
}

AttentionMetadata OffloadRunner::prefill_attention(int64_t lane, int64_t start, int64_t query_len, TensorView cu,
                                                   TensorView ctx) const {
  AttentionMetadata a;
  a.num_seqs = 1;
  a.num_tokens = query_len;
  a.max_query_len = query_len;
  a.max_context_len = start + query_len;
  a.cu_seqlens_q = cu;      // [2]: {0, query_len}
  a.context_lens = ctx;     // [1]: {start + query_len}
  const int64_t blocks = ceil_div(start + query_len, kViewBlock);
  // The lane's region in order: position p is slot lane x capacity + p.
  a.block_tables = index_view(lane * capacity_ / kViewBlock, blocks).reshape({1, blocks});
  a.slot_mapping = index_view(lane * capacity_ + start, query_len);
  a.block_size = kViewBlock;
  return a;
}

void OffloadRunner::upload_ints(const int32_t* data, int64_t n) {
  // The staging buffer is free: every step ends with the sampler's wait on the compute queue.
  dev_->copy(meta_dev_.data(), data, static_cast<size_t>(n) * 4, CopyKind::kH2D, OffloadDevice::kCompute,
             "step inputs upload");
}

void OffloadRunner::release_finished(const SchedulerOutput& out) {
  for (Lane& lane : lanes_) {
    if (lane.seq_id < 0) continue;
    const bool listed = std::any_of(out.seqs.begin(), out.seqs.end(),
                                    [&](const ScheduledSequence& s) { return s.seq->seq_id == lane.seq_id; });
    if (!listed) lane.seq_id = -1;  // finished or aborted (see the header); its pool stays for the next
  }
}

int64_t OffloadRunner::take_lane(const Sequence& seq) {
  for (const Lane& lane : lanes_)
    NANOVLLM_CHECK(lane.seq_id != seq.seq_id, "offload: request ", seq.seq_id, " is prefilled again while it holds a lane");
  const int64_t lane = largest_free_lane();
  NANOVLLM_CHECK(lane >= 0, "offload: request ", seq.seq_id, " needs a lane, but all ", num_lanes(),
                 " (offload max_num_seqs) are busy");
  return lane;
}

int64_t OffloadRunner::lane_of(const Sequence& seq) const {
  for (int64_t i = 0; i < num_lanes(); ++i) {
    const Lane& lane = lanes_[static_cast<size_t>(i)];
    if (lane.seq_id != seq.seq_id) continue;
    NANOVLLM_CHECK(seq.num_computed_tokens == lane.len && seq.num_tokens() == lane.len + 1, "offload: decode step of request ",
                   seq.seq_id, " at ", seq.num_computed_tokens, " tokens, but its lane holds ", lane.len, " tokens");
    return i;
  }
  NANOVLLM_FAIL("offload: decode step of request ", seq.seq_id, " at ", seq.num_computed_tokens,
                " tokens, but no lane holds it");
}

std::vector<SampledToken> OffloadRunner::execute(const SchedulerOutput& out) {
  release_finished(out);
  std::vector<const Sequence*> decodes;
  std::vector<int64_t> decode_lanes;
  std::vector<std::pair<size_t, SampledToken>> prefilled;  // (position in out, token)
  bool samples = true;  // whether this rank's sampler returns tokens
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    const ScheduledSequence& sch = out.seqs[i];
    const Sequence& seq = *sch.seq;
    NANOVLLM_CHECK(sch.sample, "offload: request ", seq.seq_id, " must sample every step (whole-prompt prefill)");
    if (seq.num_computed_tokens > 0) {
      NANOVLLM_CHECK(sch.num_new_tokens == 1, "offload: request ", seq.seq_id, " decodes one token per step, got ",
                     sch.num_new_tokens);
      decodes.push_back(&seq);
      decode_lanes.push_back(lane_of(seq));
      continue;
    }
    NANOVLLM_CHECK(sch.num_new_tokens == seq.num_tokens(), "offload: request ", seq.seq_id,
                   " must prefill its whole prompt in one step (", seq.num_tokens(), " tokens), got ",
                   sch.num_new_tokens);
    const int64_t lane = take_lane(seq);
    prefill(lane, seq, sch.num_new_tokens);
    std::vector<SampledToken> t = sample_({&seq}, ws_.logits.data_as<float>());
    samples = !t.empty();
    if (samples) prefilled.emplace_back(i, std::move(t[0]));
  }
  std::vector<SampledToken> decoded;
  if (!decodes.empty()) {
    decode(decodes, decode_lanes);
    decoded = sample_(decodes, ws_.logits.data_as<float>());
    samples = !decoded.empty();
  }
  if (!samples) return {};  // a tensor-parallel rank other than the first: its sampler returns nothing
  NANOVLLM_ASSERT(prefilled.size() + decoded.size() == out.seqs.size());
  // In `out` order: decodes and prefills interleave as listed.
  std::vector<SampledToken> sampled;
  size_t d = 0, p = 0;
  for (size_t i = 0; i < out.seqs.size(); ++i) {
    if (p < prefilled.size() && prefilled[p].first == i) {
      sampled.push_back(std::move(prefilled[p++].second));
    } else {
      sampled.push_back(std::move(decoded[d++]));
    }
  }
  return sampled;
}

void OffloadRunner::prefill(int64_t lane_id, const Sequence& seq, int64_t num_tokens) {
  const int64_t T = num_tokens;
  NANOVLLM_CHECK(T >= 1 && T < max_model_len_, "offload: prompt of ", T, " tokens; max_model_len is ",
                 max_model_len_);
  const OffloadDevice::Queue compute = OffloadDevice::kCompute;
  const ops::Stream st = dev_->compute_stream();
  Lane& lane = lanes_[static_cast<size_t>(lane_id)];

  // A new sequence in the lane: nothing of the previous one is read again (its host pool contents are
  // overwritten before any load reads them, and its ring regions and decode buffers are rewritten before
  // they are read).
  const int64_t reach = std::max(seq.params.reach(seq.num_prompt_tokens, max_model_len_), T + 1);  // T < max_model_len_
  const int64_t capacity = round_up(reach, cfg_.block_size);
  if (capacity > lane.host->capacity()) {
    check_pool(reach, 1);  // this rank's pool (the engine checked the whole group's before admitting it)
    dev_->synchronize();   // no queue may still touch the old regions
    stats_.host_alloc_s += lane.host->reserve(capacity);
  }
  lane.seq_id = seq.seq_id;
  lane.len = lane.flushed = 0;
  lane.capacity = capacity;
  const OffloadHostPool& host = *lane.host;

  // Inputs: ids [T], then per chunk c {0, len_c} (cu_seqlens), {start_c + len_c} (context), {len_c - 1}
  // (the sampled row), then the tokens' Dual Chunk Attention scale lengths [T] (AttentionMetadata::dca_scale_lens).
  const int64_t num_chunks = ceil_div(T, chunk_);
  const int64_t scale_lens = T + 4 * num_chunks;
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
  for (int64_t p = 0; p < T; ++p)
    h[scale_lens + p] = static_cast<int32_t>(p < seq.num_prompt_tokens ? seq.num_prompt_tokens : p + 1);
  upload_ints(h, scale_lens + T);
  auto chunk_inputs = [&](int64_t c) {
    const int64_t start = c * chunk_, n = std::min(chunk_, T - start);
    DecoderInputs in;
    in.input_ids = device_ints(start, n);
    in.positions = index_view(start, n);
    in.sample_rows = device_ints(T + 4 * c + 3, 1);
    in.attn = prefill_attention(lane_id, start, n, device_ints(T + 4 * c, 2), device_ints(T + 4 * c + 2, 1));
    in.attn.dca_scale_lens = device_ints(scale_lens + start, n);
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

  if (sparse_) sparse_->begin_prefill(lane_id, st);
  for (int64_t c = 0; c < num_chunks; ++c) model_.embed(chunk_inputs(c), chunk_workspace(c), st);
  for (int64_t l = 0; l < num_layers_; ++l) {
    const int64_t s = l % num_slots_;
    const Slot& slot = slots_[static_cast<size_t>(s)];
    // The slot's previous D2H (layer l - num_slots) has read it; no load is writing it.
    dev_->wait(compute, slot_drained_[static_cast<size_t>(s)]);
    dev_->wait(compute, slot_loaded_[static_cast<size_t>(s)]);
    note_rows(lane_rows(slot.k, lane_id), T, true, compute, "prefill layer K (qkv prologue + attention)");
    note_rows(lane_rows(slot.v, lane_id), T, true, compute, "prefill layer V (qkv prologue + attention)");
    for (int64_t c = 0; c < num_chunks; ++c) model_.layer(l, chunk_inputs(c), slot_cache(s), chunk_workspace(c), st);
    store_scales_by_head(host, l, false, lane_rows(slot.k, lane_id), T, 0);
    store_scales_by_head(host, l, true, lane_rows(slot.v, lane_id), T, 0);
    dev_->record(slot_computed_[static_cast<size_t>(s)], compute);

    // The layer's K/V [0, T) to the host pool, overlapped with the next layers' compute.
    dev_->wait(d2h_q_, slot_computed_[static_cast<size_t>(s)]);
    copy_rows(host_rows(host, l, false), lane_rows(slot.k, lane_id), T, CopyKind::kD2H, d2h_q_,
              "prefill K layer -> host pool");
    copy_rows(host_rows(host, l, true), lane_rows(slot.v, lane_id), T, CopyKind::kD2H, d2h_q_,
              "prefill V layer -> host pool");
    dev_->record(slot_drained_[static_cast<size_t>(s)], d2h_q_);
    dev_->record(host_ready_[static_cast<size_t>(l)], d2h_q_);
  }
  model_.head(chunk_inputs(num_chunks - 1), chunk_workspace(num_chunks - 1), st);

  lane.len = lane.flushed = T;  // the partial last host block stays in the pool; decode appends after it
  const int64_t d2h = T * kv_bytes_per_token_per_layer() * num_layers_;
  stats_.prefills += 1;
  stats_.prefill_tokens += T;
  stats_.d2h_bytes += d2h;
  stats_.last_step_d2h_bytes = d2h;
  stats_.last_step_h2d_bytes = 0;
}

void OffloadRunner::issue_load(int64_t layer, const std::vector<int64_t>& lanes) {
  const int64_t s = layer % num_slots_;
  const OffloadDevice::Queue q = load_q_[static_cast<size_t>(s)];
  const Slot& slot = slots_[static_cast<size_t>(s)];
  dev_->wait(q, slot_computed_[static_cast<size_t>(s)]);  // the layer that used the slot before is done
  dev_->wait(q, slot_drained_[static_cast<size_t>(s)]);   // a prefill D2H from the slot has read it
  dev_->wait(q, host_ready_[static_cast<size_t>(layer)]);  // the layer's host regions are fully written
  for (const int64_t id : lanes) {
    const Lane& lane = lanes_[static_cast<size_t>(id)];
    copy_rows(lane_rows(slot.k, id), host_rows(*lane.host, layer, false), lane.flushed, CopyKind::kH2D, q,
              "load K host pool -> layer buffer");
    copy_rows(lane_rows(slot.v, id), host_rows(*lane.host, layer, true), lane.flushed, CopyKind::kH2D, q,
              "load V host pool -> layer buffer");
    const int64_t bytes = lane.flushed * kv_bytes_per_token_per_layer();
    stats_.h2d_bytes += bytes;
    stats_.last_step_h2d_bytes += bytes;
  }
  dev_->record(slot_loaded_[static_cast<size_t>(s)], q);
}

void OffloadRunner::decode(const std::vector<const Sequence*>& seqs, const std::vector<int64_t>& lanes) {
  const int64_t B = static_cast<int64_t>(seqs.size());
  const OffloadDevice::Queue compute = OffloadDevice::kCompute;
  const ops::Stream st = dev_->compute_stream();
  stats_.last_step_h2d_bytes = stats_.last_step_d2h_bytes = 0;

  // Inputs, one row per sequence: ids [B], positions [B], context lengths [B], slots [B], then the view
  // block tables [B, MB] (and for sparse decode the page tables [B, MP]) of the rows' lanes, then the rows'
  // Dual Chunk Attention scale lengths [B] (position + 1: every decode token is a generated one).
  int64_t longest = 0;
  for (const int64_t id : lanes) longest = std::max(longest, lanes_[static_cast<size_t>(id)].len + 1);
  const int64_t MB = ceil_div(longest, kViewBlock);
  int32_t* h = meta_host_.view().data_as<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t id = lanes[static_cast<size_t>(b)];
    const int64_t n = lanes_[static_cast<size_t>(id)].len;  // the new token's position
    h[b] = seqs[static_cast<size_t>(b)]->token_ids[static_cast<size_t>(n)];
    h[B + b] = static_cast<int32_t>(n);
    h[2 * B + b] = static_cast<int32_t>(n + 1);
    h[3 * B + b] = static_cast<int32_t>(id * capacity_ + n);
    for (int64_t j = 0; j < MB; ++j) h[4 * B + b * MB + j] = static_cast<int32_t>(id * capacity_ / kViewBlock + j);
  }
  int64_t ints = 4 * B + B * MB;
  const int64_t tables = ints;
  int64_t MP = 0;
  if (sparse_) {
    MP = ceil_div(longest, page_size_);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t id = lanes[static_cast<size_t>(b)];
      for (int64_t j = 0; j < MP; ++j) h[tables + b * MP + j] = static_cast<int32_t>(id * (capacity_ / page_size_) + j);
    }
    ints += B * MP;
  }
  const int64_t scale_lens = ints;
  for (int64_t b = 0; b < B; ++b) h[scale_lens + b] = h[2 * B + b];
  ints += B;
  upload_ints(h, ints);

  DecoderInputs in;
  in.input_ids = device_ints(0, B);
  in.positions = device_ints(B, B);
  in.sample_rows = index_view(0, B);
  AttentionMetadata& a = in.attn;
  a.num_seqs = B;
  a.num_tokens = B;
  a.max_query_len = 1;
  a.max_context_len = longest;
  a.cu_seqlens_q = index_view(0, B + 1);  // 0, 1, ..., B
  a.context_lens = device_ints(2 * B, B);
  a.block_tables = device_ints(4 * B, B * MB).reshape({B, MB});
  a.slot_mapping = device_ints(3 * B, B);
  a.dca_scale_lens = device_ints(scale_lens, B);
  a.block_size = kViewBlock;
  a.num_leading_decodes = B;
  in.taps = taps_;
  in.attention_policy = sparse_.get();

  dev_->wait(compute, flush_done_);  // the decode buffers' last flush has read them
  if (sparse_) {
    std::vector<OffloadDecodeRow> rows;
    for (const int64_t id : lanes) rows.push_back({.lane = id, .host_tokens = lanes_[static_cast<size_t>(id)].flushed});
    sparse_->begin_decode(std::move(rows), device_ints(tables, B * MP).reshape({B, MP}));
  } else {
    for (int64_t l = 0; l < num_slots_; ++l) issue_load(l, lanes);
  }
  model_.embed(in, ws_, st);
  std::vector<ops::ByteCopy> copies;  // a layer's decode-buffer rows of every lane (K, V and their scales)
  for (int64_t l = 0; l < num_layers_; ++l) {
    const int64_t s = l % num_slots_;
    const Slot& slot = slots_[static_cast<size_t>(s)];
    if (sparse_) {  // the selected pages of [0, F) are read from the host pools inside the layer
      dev_->wait(compute, slot_drained_[static_cast<size_t>(s)]);  // a prefill D2H from the slot has read it
      dev_->wait(compute, host_ready_[static_cast<size_t>(l)]);    // the layer's host regions are written
      for (const int64_t id : lanes) {
        const Lane& lane = lanes_[static_cast<size_t>(id)];
        note_rows(host_rows(*lane.host, l, false), lane.flushed, false, compute, "sparse fetch host K");
        note_rows(host_rows(*lane.host, l, true), lane.flushed, false, compute, "sparse fetch host V");
      }
    } else {
      dev_->wait(compute, slot_loaded_[static_cast<size_t>(s)]);
    }
    // Each lane's region = [host prefix 0..F) | decode buffer F..n) | new token n]: one launch for every lane's
    // rows in, one for the new tokens out.
    copies.clear();
    for (const int64_t id : lanes) {
      const Lane& lane = lanes_[static_cast<size_t>(id)];
      const int64_t m = lane.len - lane.flushed;
      const KvRows k = lane_rows(slot.k, id), v = lane_rows(slot.v, id);
      add_copy(copies, at(k, lane.flushed), decode_buffer(id, l, false), m);
      add_copy(copies, at(v, lane.flushed), decode_buffer(id, l, true), m);
    }
    dev_->copy_batch_d2d(copies, "decode buffers -> layer buffer");
    for (const int64_t id : lanes) {
      const Lane& lane = lanes_[static_cast<size_t>(id)];
      note_rows(lane_rows(slot.k, id), lane.len + 1, true, compute, "decode layer K (prologue + attention)");
      note_rows(lane_rows(slot.v, id), lane.len + 1, true, compute, "decode layer V (prologue + attention)");
    }
    model_.layer(l, in, slot_cache(s), ws_, st);
    copies.clear();
    for (const int64_t id : lanes) {
      const Lane& lane = lanes_[static_cast<size_t>(id)];
      const int64_t m = lane.len - lane.flushed, n = lane.len;
      add_copy(copies, at(decode_buffer(id, l, false), m), at(lane_rows(slot.k, id), n), 1);
      add_copy(copies, at(decode_buffer(id, l, true), m), at(lane_rows(slot.v, id), n), 1);
    }
    dev_->copy_batch_d2d(copies, "new tokens -> decode buffers");
    dev_->record(slot_computed_[static_cast<size_t>(s)], compute);
    if (!sparse_ && l + num_slots_ < num_layers_) issue_load(l + num_slots_, lanes);
  }
  model_.head(in, ws_, st);
  for (const int64_t id : lanes) {
    Lane& lane = lanes_[static_cast<size_t>(id)];
    NANOVLLM_ASSERT(lane.len + 1 <= lane.capacity && lane.len + 1 - lane.flushed <= cfg_.block_size);
    lane.len += 1;
    if (lane.len % cfg_.block_size == 0) flush_decode_buffers(id, lane.len);
  }
  stats_.decode_steps += 1;
  stats_.decode_tokens += B;
}

PageCacheCounters OffloadRunner::sparse_cache_counters() const {
  return sparse_ ? sparse_->cache_counters(dev_->compute_stream()) : PageCacheCounters{};
}

void OffloadRunner::flush_decode_buffers(int64_t lane_id, int64_t end) {
  Lane& lane = lanes_[static_cast<size_t>(lane_id)];
  const int64_t count = end - lane.flushed;
  dev_->record(decode_written_, OffloadDevice::kCompute);
  dev_->wait(d2h_q_, decode_written_);
  for (int64_t l = 0; l < num_layers_; ++l) {
    store_scales_by_head(*lane.host, l, false, decode_buffer(lane_id, l, false), count, lane.flushed);
    store_scales_by_head(*lane.host, l, true, decode_buffer(lane_id, l, true), count, lane.flushed);
    copy_rows(at(host_rows(*lane.host, l, false), lane.flushed), decode_buffer(lane_id, l, false), count,
              CopyKind::kD2H, d2h_q_, "flush decode buffer K -> host pool");
    copy_rows(at(host_rows(*lane.host, l, true), lane.flushed), decode_buffer(lane_id, l, true), count,
              CopyKind::kD2H, d2h_q_, "flush decode buffer V -> host pool");
    dev_->record(host_ready_[static_cast<size_t>(l)], d2h_q_);
  }
  dev_->record(flush_done_, d2h_q_);
  lane.flushed = end;
  const int64_t bytes = count * kv_bytes_per_token_per_layer() * num_layers_;
  stats_.d2h_bytes += bytes;
  stats_.last_step_d2h_bytes += bytes;
}

}  // namespace nanovllm
