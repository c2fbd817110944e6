#include "nanovllm/runner/cuda/cuda_model_runner.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>

#include "nanovllm/core/env.h"
#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/cuda_memory.h"
#include "nanovllm/kernels/cuda/fp8_linear.h"
#include "nanovllm/kernels/cuda/sampling.h"
#include "nanovllm/model/rope.h"
#include "nanovllm/model/tensor_parallel_plan.h"
#include "nanovllm/model/weights.h"
#include "nanovllm/offload/cuda/cuda_offload_device.h"
#include "nanovllm/runner/cuda/nvtx_range.h"
#include "nanovllm/runner/kv_cache_layout.h"
#include "nanovllm/runner/forward_batch.h"
#include "nanovllm/runner/weight_quantization.h"

namespace nanovllm {

CudaModelRunner::CudaModelRunner(const EngineConfig& ec, const ModelConfig& config)
    : ec_(ec), kernels_(device_) {
  CUDA_CHECK(cudaSetDevice(device_));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  load_model(ec.model.path, config, TensorParallelRank{});
  init(config, 1, true);
}

CudaModelRunner::CudaModelRunner(const EngineConfig& ec, const ModelConfig& config, TensorParallelRank tp,
                                 int device)
    : ec_(ec), device_(device), kernels_(device_) {
  CUDA_CHECK(cudaSetDevice(device_));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  const int64_t tp_size = tp.plan.size;
  const ModelConfig rank = rank_config(config, tp.plan);
  load_model(ec.model.path, config, std::move(tp));
  init(rank, tp_size, false);
}

void CudaModelRunner::start_tensor_parallel() {
  CUDA_CHECK(cudaSetDevice(device_));
  const int64_t bs = ec_.cache.block_size;
  const int64_t tokens = std::min({ec_.scheduler.max_num_batched_tokens, ec_.model.max_model_len, num_kv_blocks_ * bs});
  Sequence seq;  // a stand-in prompt; its K/V lands in blocks a real request overwrites before reading
  seq.seq_id = -1;
  seq.token_ids.assign(static_cast<size_t>(tokens), 0);
  seq.num_prompt_tokens = tokens;
  for (int64_t b = 0; b * bs < tokens; ++b) seq.block_table.push_back(static_cast<int32_t>(b));
  SchedulerOutput out;
  out.seqs.push_back(ScheduledSequence{&seq, tokens, false});
  execute(out);
  capture_decode_graphs();
}

void CudaModelRunner::init(const ModelConfig& config, int64_t tp_size, bool capture_graphs) {
  const EngineConfig& ec = ec_;
  // Activations for the largest step, then the KV cache from what the memory budget leaves.
  size_t ws_bytes = 0;
  Decoder::make_workspace(config, DType::kBF16, nullptr, Device::cuda(device_),
                          ec.scheduler.max_num_batched_tokens, ec.scheduler.max_num_seqs, &ws_bytes, tp_size);
  workspace_ = Buffer(cuda_allocator(device_), ws_bytes);
  ws_ = Decoder::make_workspace(config, DType::kBF16, workspace_.data(), Device::cuda(device_),
                                ec.scheduler.max_num_batched_tokens, ec.scheduler.max_num_seqs, nullptr, tp_size);

  // Packed step inputs (ForwardBatch): ids, positions, slots, DCA scale lengths [T each], cu_seqlens [S + 1],
  // context lens, sample rows [S each], tables [S, max blocks], and (eager steps) per-sequence cu_seqlens [S, 2].
  const int64_t max_blocks_per_seq = ec.blocks_per_max_len_seq();
  max_batch_ints_ = 4 * ec.scheduler.max_num_batched_tokens + 5 * ec.scheduler.max_num_seqs + 1 +
                    ec.scheduler.max_num_seqs * max_blocks_per_seq;
  for (size_t i = 0; i < batch_host_.size(); ++i) {
    batch_host_[i] = Buffer(pinned_host_allocator(), static_cast<size_t>(max_batch_ints_) * 4);
    batch_host_mapped_[i] = mapped_device_pointer(batch_host_[i].data());
  }
  batch_device_ = Buffer(cuda_allocator(device_), static_cast<size_t>(max_batch_ints_) * 4);
  sampler_ = std::make_unique<GpuSampler>(config.eos_token_ids, config.vocab_size, ec.scheduler.max_num_seqs, device_);
  sparse_ = std::make_unique<RunnerSparseAttention>(ec, config, cuda_allocator(device_));
  if (ec.offload.enabled) {  // before the paged KV cache, which takes what the budget leaves
    offload_ = std::make_unique<OffloadRunner>(
        *model_, make_cuda_offload_device(device_, ops_stream()), ec, ws_,
        [this](const std::vector<const Sequence*>& seqs, float* logits) { return sampler_->sample(seqs, logits, stream_); });
    offload_->set_prefill_policy(sparse_->prefill());
  }
  allocate_kv_cache(config);

  // nano-vLLM's buckets: 1, 2, 4, 8, then every 16 up to min(max_num_seqs, 512).
  if (!ec.model.enforce_eager) {
    const int64_t max_bs = std::min<int64_t>(ec.scheduler.max_num_seqs, 512);
    for (int64_t b : {1, 2, 4, 8})
      if (b <= max_bs) graph_buckets_.push_back(b);
    for (int64_t b = 16; b <= max_bs; b += 16) graph_buckets_.push_back(b);
    if (graph_buckets_.empty() || graph_buckets_.back() < max_bs) graph_buckets_.push_back(max_bs);
  }
  max_table_stride_ = max_blocks_per_seq;
  // Tensor parallel: no per-rank timing decisions that change how many collectives a rank runs (decode_graphs.h).
  graphs_ = std::make_unique<DecodeGraphs>(
      stream_, kernels_, [this](const DecoderInputs& in) { model_->forward(in, kv_, ws_, ops_stream()); },
      [this](const ForwardBatch& batch) { upload_batch(batch); }, environment().tune_linear && tp_size == 1);
  if (capture_graphs) capture_decode_graphs();
}

void CudaModelRunner::capture_decode_graphs() {
  if (graph_buckets_.empty()) return;
  // Every bucket at every block-table stride up to kMaxPrecapturedContext tokens, before the first
  // request (as vLLM and nano-vLLM do): otherwise a step that first meets a (batch size, stride) pair
  // pays a warm-up forward, capture and instantiation (~3 ms) mid-run. Measured on H200: the throughput
  // bench's contexts grow through strides 16-128 while its batch shrinks through every bucket, ~20 such
  // stalls = 1% of the run. Longer contexts capture their stride's graph on first use. Largest batch
  // and stride first, so workspaces grow once. Padding rows store no K/V.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> strides;
  for (int64_t s = kMinGraphTableStride;; s *= 2) {
    const int64_t capped = std::min(s, max_table_stride_);
    if (!strides.empty() && capped * ec_.cache.block_size > kMaxPrecapturedContext) break;
    strides.push_back(capped);
    if (capped == max_table_stride_) break;
  }
  for (auto st = strides.rbegin(); st != strides.rend(); ++st)
    for (auto it = graph_buckets_.rbegin(); it != graph_buckets_.rend(); ++it) run_decode_graph({}, *it, *st);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  NANOVLLM_INFO("captured ", graphs_->size(), " decode graphs (batch sizes 1-", graph_buckets_.back(),
                ", block tables of ", strides.front(), "-", strides.back(), " blocks) in ",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), " s");
}

CudaModelRunner::~CudaModelRunner() {
  cudaSetDevice(device_);  // a tensor-parallel group destroys its ranks from one thread
  if (stream_) cudaStreamSynchronize(stream_);
  graphs_.reset();
  offload_.reset();  // synchronizes its copy streams, destroys them; before the compute stream goes
  kv_.clear();
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaModelRunner::load_model(const std::filesystem::path& model_dir, const ModelConfig& config,
                                 TensorParallelRank tp) {
  const auto t0 = std::chrono::steady_clock::now();
  WeightLoadOptions opt;
  opt.dtype = DType::kBF16;
  // fp8 projections stay e4m3 where the fp8 kernels run (sm_90 with this build's code), else bf16.
  const bool fp8_kernels = cuda_ops::fp8_tensor_cores_available(kernels_);
  set_weight_quantization(opt, ec_.model, fp8_kernels);
  if (!fp8_kernels && (config.quantization.fp8() || ec_.model.quantization == "fp8"))
    NANOVLLM_WARN("GPU ", device_, " has no fp8 tensor cores this build can use: fp8 weights are dequantized to bf16");
  if (tp.plan.size > 1) opt.shard = &tp.plan;  // only this rank's slices
  opt.allocator = &cuda_allocator(device_);
  size_t uploaded = 0;
  opt.upload = [&uploaded](void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    uploaded += bytes;
  };
  ModelWeights weights = load_weights(model_dir, config, opt);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  NANOVLLM_INFO(tp.plan.size > 1 ? "rank " + std::to_string(tp.plan.rank) + ": " : std::string(), "loaded ",
                uploaded / 1e9, " GB of weights on GPU ", device_, " in ", seconds, " s (", uploaded / 1e9 / seconds,
                " GB/s)");
  const ModelConfig model_config = tp.plan.size > 1 ? rank_config(config, tp.plan) : config;
  make_model(model_config, std::move(weights), std::move(tp));
}

void CudaModelRunner::make_model(const ModelConfig& config, ModelWeights weights, TensorParallelRank tp) {
  const RopeTable rope = compute_rope(config);
  rope_inv_freq_ = Buffer(cuda_allocator(device_), DType::kF32, Shape{static_cast<int64_t>(rope.inv_freq.size())});
  CUDA_CHECK(cudaMemcpy(rope_inv_freq_.data(), rope.inv_freq.data(), rope.inv_freq.size() * 4, cudaMemcpyHostToDevice));
  model_ = std::make_unique<Decoder>(config, std::move(weights), rope_inv_freq_.view(), rope.attention_scaling,
                                     std::move(tp));
}

void CudaModelRunner::allocate_kv_cache(const ModelConfig& config) {
  // bf16, or --kv-cache-dtype fp8's codes + scales (kernels/kv_cache.h).
  PagedKvLayout layout{.layers = config.num_hidden_layers, .block_size = ec_.cache.block_size,
                       .kv_heads = config.num_key_value_heads, .head_dim = config.head_dim,
                       .dtype = ec_.cache.kv_dtype(DType::kBF16)};
  // The sparse policy's page metadata (bf16) grows with the blocks; its workspace comes off the budget first.
  const SparseDecodeBytes sparse = RunnerSparseAttention::decode_bytes(ec_, config, DType::kBF16);
  const int64_t bytes_per_block = layout.bytes_per_block() + sparse.per_block;
  if (ec_.cache.num_kv_blocks > 0) {
    num_kv_blocks_ = ec_.cache.num_kv_blocks;
  } else {
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    // Everything in use now (weights, workspace, other processes) counts against the budget; keep
    // 256 MiB for cuBLASLt and attention workspaces created on first use.
    const double budget = ec_.cache.gpu_memory_utilization * static_cast<double>(total_bytes) -
                          static_cast<double>(total_bytes - free_bytes) - 256.0 * (1 << 20) -
                          static_cast<double>(sparse.fixed);
    const int64_t useful = ec_.scheduler.max_num_seqs * ec_.blocks_per_max_len_seq() + 1;
    num_kv_blocks_ = std::min(static_cast<int64_t>(budget / static_cast<double>(bytes_per_block)), useful);
  }
  // With CPU offload its GPU buffers come first (the ring, and for sparse decode the page summaries and the hot-page
  // cache of every lane): say what they took and which options shrink them.
  const std::string offload_note =
      offload_ ? detail::concat("; the CPU offload's GPU buffers took ",
                                static_cast<double>(offload_->footprint().total()) / (1 << 30),
                                " GiB (fewer with a smaller --offload-max-num-seqs, --max-model-len or "
                                "--sparse-gpu-cache-tokens)")
               : std::string();
  NANOVLLM_CHECK(num_kv_blocks_ >= 1, "no GPU memory left for the KV cache (gpu_memory_utilization ",
                 ec_.cache.gpu_memory_utilization, ")", offload_note);
  NANOVLLM_INFO("cuda runner: ", num_kv_blocks_, " KV blocks of ", ec_.cache.block_size, " tokens (",
                num_kv_blocks_ * bytes_per_block / (1 << 20), " MiB, ", dtype_name(layout.dtype), ")");
  layout.blocks = num_kv_blocks_;
  kv_storage_ = Buffer(cuda_allocator(device_), layout.total_bytes());
  kv_ = layout.carve(kv_storage_.data(), Device::cuda(device_));
  sparse_->make_decode_policy(num_kv_blocks_, DType::kBF16);
}

AttentionPolicy* CudaModelRunner::eager_policy(const SchedulerOutput& out) const {
  return sparse_->for_step(std::any_of(out.seqs.begin(), out.seqs.end(),
                                       [](const ScheduledSequence& s) { return s.num_new_tokens > 1; }));
}

int64_t CudaModelRunner::graph_bucket(int64_t num_seqs) const {
  for (int64_t b : graph_buckets_)
    if (b >= num_seqs) return b;
  return 0;
}

int64_t CudaModelRunner::graph_table_stride(const SchedulerOutput& out) const {
  int64_t longest = 1;
  for (const ScheduledSequence& s : out.seqs)
    longest = std::max(longest, static_cast<int64_t>(s.seq->block_table.size()));
  int64_t stride = kMinGraphTableStride;
  while (stride < longest) stride *= 2;
  return std::min(stride, max_table_stride_);
}

void CudaModelRunner::upload_batch(const ForwardBatch& batch, cuda_ops::StagedWords extra) {
  NANOVLLM_ASSERT(static_cast<int64_t>(batch.data.size()) <= max_batch_ints_);
  // One transfer of the packed inputs. The staging slot is free: the step that used it last was waited
  // for (at most two steps are in flight, alternating slots). Small batches (every decode step up to long
  // contexts) are staged by a kernel reading the pinned slot, which also feeds the ids: on an H100 the
  // H2D copy and the feed kernel cost ~8-13 us of stream time per step (docs/experiments.md, "No copy
  // engine around a decode step").
  const size_t s = static_cast<size_t>(staging_slot_);
  const int64_t n = static_cast<int64_t>(batch.data.size());
  std::memcpy(batch_host_[s].data(), batch.data.data(), static_cast<size_t>(n) * 4);
  auto* dev = static_cast<int32_t*>(batch_device_.data());
  const int32_t* fed = step_fed_ ? sampler_->device_token_ids() : nullptr;
  if (n * 4 <= kMaxKernelStagedBytes) {
    cuda_ops::stage_step_inputs(dev, static_cast<const int32_t*>(batch_host_mapped_[s]), n, batch.input_ids,
                                batch.num_tokens, fed, extra, ops_stream());
    return;
  }
  copy_h2d(dev, batch_host_[s].data(), static_cast<size_t>(n) * 4, stream_);
  if (fed != nullptr) cuda_ops::feed_sampled_tokens(dev + batch.input_ids, batch.num_tokens, fed, stream_);
  if (extra.words > 0) cuda_ops::stage_step_inputs(nullptr, nullptr, 0, 0, 0, nullptr, extra, ops_stream());
}

void CudaModelRunner::run_eager(const SchedulerOutput& out) {
  const ForwardBatch batch = build_forward_batch(out, ec_.cache.block_size);
  upload_batch(batch);
  // The host arrays stay valid through the forward: sparse prefill reads each sequence's length there.
  DecoderInputs in = batch.views(batch_device_.data(), Device::cuda(device_), batch.data.data());
  in.taps = taps_;
  in.attention_policy = eager_policy(out);
  model_->forward(in, kv_, ws_, ops_stream());
}

void CudaModelRunner::run_decode_graph(const SchedulerOutput& out, int64_t bucket, int64_t table_stride,
                                       cuda_ops::StagedWords extra) {
  // Launch sizing (attention splits) must hold for any context the graph replays: the stride's capacity.
  const int64_t max_context = std::min(ec_.model.max_model_len, table_stride * ec_.cache.block_size);
  ForwardBatch batch = build_padded_decode_batch(out, ec_.cache.block_size, bucket, table_stride, max_context);
  if (step_fed_) {  // the placeholders become "the previous step's row r" (-1 - r), resolved on the device
    for (size_t i = 0; i < out.seqs.size(); ++i) {
      const auto it = last_step_rows_.find(out.seqs[i].seq->seq_id);
      NANOVLLM_CHECK(it != last_step_rows_.end(), "request ", out.seqs[i].seq->seq_id,
                     " was not in the step its input is fed from");
      batch.data[static_cast<size_t>(batch.input_ids) + i] = -1 - it->second;
    }
  }
  upload_batch(batch, extra);
  DecoderInputs in = batch.views(batch_device_.data(), Device::cuda(device_));
  in.attention_policy = sparse_->decode();  // captured into the graph with the rest of the step
  CUDA_CHECK(cudaGraphLaunch(graphs_->get(bucket, table_stride, in, batch, num_kv_blocks_), stream_));
}

std::vector<SampledToken> CudaModelRunner::execute(const SchedulerOutput& out) {
  if (out.empty()) return {};
  CUDA_CHECK(cudaSetDevice(device_));  // a tensor-parallel rank's thread may not have it current
  NANOVLLM_CHECK(out.num_tokens() <= ec_.scheduler.max_num_batched_tokens &&
                     static_cast<int64_t>(out.seqs.size()) <= ec_.scheduler.max_num_seqs,
                 "step of ", out.num_tokens(), " tokens / ", out.seqs.size(), " seqs exceeds the runner's limits");
  NANOVLLM_CHECK(launched_.empty(), "CudaModelRunner::execute: launched steps are outstanding");
  if (can_launch(out)) {
    launch(out, false);
    return wait_oldest();
  }
  const bool decode_only = std::all_of(out.seqs.begin(), out.seqs.end(), [](const ScheduledSequence& s) {
    return s.num_new_tokens == 1 && s.sample;
  });
  NvtxRange range(decode_only ? "decode" : "prefill");
  staging_slot_ = next_slot_;  // nothing is in flight: either slot is free
  step_fed_ = false;
  run_eager(out);
  return sample(out);
}

bool CudaModelRunner::can_launch(const SchedulerOutput& out) const {
  const bool decode_only = !out.empty() && std::all_of(out.seqs.begin(), out.seqs.end(), [](const ScheduledSequence& s) {
    return s.num_new_tokens == 1 && s.sample;
  });
  // Tapped steps run eagerly (run_eager), which gives the taps their inputs.
  return decode_only && taps_ == nullptr && graph_bucket(static_cast<int64_t>(out.seqs.size())) > 0;
}

void CudaModelRunner::launch(const SchedulerOutput& out, bool fed_from_previous) {
  NANOVLLM_CHECK(can_launch(out), "CudaModelRunner::launch: not a decode step with a graph");
  CUDA_CHECK(cudaSetDevice(device_));
  NANOVLLM_CHECK(launched_.size() < 2, "CudaModelRunner::launch: two steps are already in flight");
  NANOVLLM_CHECK(!fed_from_previous || !last_step_rows_.empty(), "CudaModelRunner::launch: nothing to feed from");
  NvtxRange range("decode");
  // Longest context first: decode attention's CTAs are dispatched in sequence order, so the last
  // ones to start (the tail of the kernel) are the shortest (H200, 256 seqs U[100, 2000]: -2%).
  LaunchedStep step;
  step.slot = next_slot_;
  step.order.resize(out.seqs.size());
  std::iota(step.order.begin(), step.order.end(), size_t{0});
  std::stable_sort(step.order.begin(), step.order.end(), [&](size_t a, size_t b) {
    return out.seqs[a].seq->num_tokens() > out.seqs[b].seq->num_tokens();
  });
  SchedulerOutput sorted;
  sorted.seqs.reserve(out.seqs.size());
  for (size_t i : step.order) sorted.seqs.push_back(out.seqs[i]);
  std::vector<const Sequence*> seqs;
  seqs.reserve(sorted.seqs.size());
  for (const ScheduledSequence& s : sorted.seqs) seqs.push_back(s.seq);
  // The sampler's inputs travel with the step's (upload_batch) when they are small enough.
  const cuda_ops::StagedWords sampler_inputs = sampler_->pack(step.slot, seqs);
  const bool staged = sampler_inputs.words * 4 <= kMaxKernelStagedBytes;
  staging_slot_ = step.slot;
  step_fed_ = fed_from_previous;
  run_decode_graph(sorted, graph_bucket(static_cast<int64_t>(sorted.seqs.size())), graph_table_stride(sorted),
                   staged ? sampler_inputs : cuda_ops::StagedWords{});
  step_fed_ = false;
  // Structured outputs: the token masks are host work, done while the forward pass runs.
  NANOVLLM_CHECK(!fed_from_previous || std::none_of(seqs.begin(), seqs.end(), [](const Sequence* q) { return q->constraint != nullptr; }),
                 "CudaModelRunner::launch: a step fed on the device cannot carry a structured-output constraint");
  sampler_->fill_masks(step.slot);
  sampler_->enqueue_packed(step.slot, ws_.logits.data_as<float>(), stream_, staged);
  last_step_rows_.clear();
  for (size_t k = 0; k < seqs.size(); ++k) last_step_rows_[seqs[k]->seq_id] = static_cast<int32_t>(k);
  launched_.push_back(std::move(step));
  next_slot_ ^= 1;
}

std::vector<SampledToken> CudaModelRunner::wait_oldest() {
  NANOVLLM_CHECK(!launched_.empty(), "CudaModelRunner::wait_oldest: no launched step");
  CUDA_CHECK(cudaSetDevice(device_));
  const LaunchedStep step = std::move(launched_.front());
  launched_.pop_front();
  std::vector<SampledToken> tokens = sampler_->collect(step.slot);
  std::vector<SampledToken> in_order(tokens.size());  // every decode row samples: back to `out` order
  for (size_t k = 0; k < step.order.size(); ++k) in_order[step.order[k]] = std::move(tokens[k]);
  return in_order;
}

std::vector<SampledToken> CudaModelRunner::sample(const SchedulerOutput& out) {
  // Sampled rows come first in the logits (graph padding rows follow them). The sampler ends with a
  // stream sync, which also frees the pinned input staging buffer for the next step.
  std::vector<const Sequence*> sampled;
  for (const ScheduledSequence& sch : out.seqs)
    if (sch.sample) sampled.push_back(sch.seq);
  if (sampled.empty()) {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return {};
  }
  return sampler_->sample(sampled, ws_.logits.data_as<float>(), stream_);
}

}  // namespace nanovllm
