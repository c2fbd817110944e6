#include "nanovllm/runner/cpu_model_runner.h"

#include <algorithm>

#include "nanovllm/core/logging.h"
#include "nanovllm/engine/sampler.h"
#include "nanovllm/model/rope.h"
#include "nanovllm/model/weights.h"
#include "nanovllm/runner/forward_batch.h"
#include "nanovllm/runner/kv_cache_layout.h"
#include "nanovllm/runner/weight_quantization.h"

namespace nanovllm {

namespace {

ModelWeights load_cpu_weights(const EngineConfig& ec, const ModelConfig& config) {
  WeightLoadOptions opt;
  set_weight_quantization(opt, ec.model, /*fp8_kernels=*/false);
  return load_weights(ec.model.path, config, opt);
}

}  // namespace

CpuModelRunner::CpuModelRunner(const EngineConfig& ec, const ModelConfig& config)
    : CpuModelRunner(ec, config, load_cpu_weights(ec, config), TensorParallelRank{}) {}

CpuModelRunner::CpuModelRunner(const EngineConfig& ec, const ModelConfig& full_config, ModelWeights weights,
                               TensorParallelRank tp)
    : ec_(ec), sampler_(full_config.eos_token_ids), samples_(tp.plan.rank == 0) {
  const int64_t tp_size = tp.plan.size;
  const ModelConfig config = tp_size > 1 ? rank_config(full_config, tp.plan) : full_config;
  const RopeTable rope = compute_rope(config);
  rope_inv_freq_ = rope.inv_freq;
  const TensorView inv_freq(rope_inv_freq_.data(), DType::kF32, Shape{static_cast<int64_t>(rope_inv_freq_.size())});
  model_ = std::make_unique<Decoder>(config, std::move(weights), inv_freq, rope.attention_scaling, std::move(tp));

  // KV cache: per layer K and V [NB, BS, Hk, D] in fp32 (or --kv-cache-dtype's format), one allocation.
  PagedKvLayout layout{.layers = config.num_hidden_layers, .block_size = ec.cache.block_size,
                       .kv_heads = config.num_key_value_heads, .head_dim = config.head_dim,
                       .dtype = ec.cache.kv_dtype(DType::kF32)};
  const int64_t bytes_per_block = layout.bytes_per_block();
  const int64_t blocks_per_seq = ec.blocks_per_max_len_seq();
  num_kv_blocks_ = ec.cache.num_kv_blocks > 0 ? ec.cache.num_kv_blocks
                                              : std::min(ec.cache.kv_cache_bytes / bytes_per_block,
                                                         ec.scheduler.max_num_seqs * blocks_per_seq);
  NANOVLLM_CHECK(num_kv_blocks_ >= 1, "KV cache budget of ", ec.cache.kv_cache_bytes, " bytes holds no block of ",
                 bytes_per_block, " bytes");
  if (samples_)
    NANOVLLM_INFO("cpu runner: ", num_kv_blocks_, " KV blocks of ", ec.cache.block_size, " tokens (",
                  num_kv_blocks_ * bytes_per_block / (1 << 20), " MiB, ", dtype_name(layout.dtype), ")");
  layout.blocks = num_kv_blocks_;
  kv_storage_ = Buffer(cpu_allocator(), layout.total_bytes());
  kv_ = layout.carve(kv_storage_.data(), Device::cpu());

  size_t ws_bytes = 0;
  Decoder::make_workspace(config, DType::kF32, nullptr, Device::cpu(), ec.scheduler.max_num_batched_tokens,
                          ec.scheduler.max_num_seqs, &ws_bytes, tp_size);
  workspace_storage_ = Buffer(cpu_allocator(), ws_bytes);
  ws_ = Decoder::make_workspace(config, DType::kF32, workspace_storage_.data(), Device::cpu(),
                                ec.scheduler.max_num_batched_tokens, ec.scheduler.max_num_seqs, nullptr, tp_size);
  sparse_ = std::make_unique<RunnerSparseAttention>(ec, config, cpu_allocator());
  sparse_->make_decode_policy(num_kv_blocks_, layout.dtype == DType::kF8E4M3 ? DType::kF32 : layout.dtype);
  if (ec.offload.enabled) {
    // The CPU offload device defers copies and checks every access against the events (CI's stand-in
    // for CUDA streams).
    offload_ = std::make_unique<OffloadRunner>(
        *model_, make_cpu_offload_device(), ec, ws_,
        [this](const std::vector<const Sequence*>& seqs, float* logits) -> std::vector<SampledToken> {
          if (!samples_) return {};  // tensor parallel: rank 0 samples from the same gathered logits
          return sampler_.sample(logits, model_->config().vocab_size, seqs);
        });
    offload_->set_prefill_policy(sparse_->prefill());
  }
}

std::vector<SampledToken> CpuModelRunner::execute(const SchedulerOutput& out) {
  if (out.empty()) return {};
  NANOVLLM_CHECK(out.num_tokens() <= ec_.scheduler.max_num_batched_tokens &&
                     static_cast<int64_t>(out.seqs.size()) <= ec_.scheduler.max_num_seqs,
                 "step of ", out.num_tokens(), " tokens / ", out.seqs.size(), " seqs exceeds the runner's limits");
  ForwardBatch batch = build_forward_batch(out, ec_.cache.block_size);
  DecoderInputs in = batch.views(batch.data.data(), Device::cpu());
  in.taps = taps_;
  in.attention_policy = sparse_->all_steps();
  model_->forward(in, kv_, ws_);
  if (!samples_) return {};  // tensor parallel: rank 0 samples from the same gathered logits

  std::vector<const Sequence*> sampled;
  for (const ScheduledSequence& s : out.seqs)
    if (s.sample) sampled.push_back(s.seq);
  return sampler_.sample(ws_.logits.data_as<float>(), model_->config().vocab_size, sampled);
}

}  // namespace nanovllm
