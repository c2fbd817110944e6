// The CUDA runner: bf16 weights and KV cache on one GPU, a dedicated compute stream, the step's
// inputs moved with one host->device copy, no allocation inside a step.
#pragma once

#include <array>
#include <deque>
#include <memory>
#include <unordered_map>

#include <cuda_runtime.h>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/cuda/sampling.h"
#include "nanovllm/model/decoder.h"
#include "nanovllm/runner/cuda/decode_graphs.h"
#include "nanovllm/runner/cuda/gpu_sampler.h"
#include "nanovllm/runner/forward_batch.h"
#include "nanovllm/offload/offload_runner.h"
#include "nanovllm/runner/model_runner.h"
#include "nanovllm/runner/sparse_attention.h"

namespace nanovllm {

class CudaModelRunner final : public ModelRunner {
 public:
  CudaModelRunner(const EngineConfig& ec, const ModelConfig& config);
  // Rank tp.plan.rank of a tensor-parallel group on `device` of this host: `config` the full model's; the
  // rank reads its slices of the checkpoint and uploads them (bf16). Run on the rank's own thread (the
  // device becomes current there). Every rank samples the same gathered logits (so fed async steps work
  // per rank); the group returns rank 0's tokens.
  CudaModelRunner(const EngineConfig& ec, const ModelConfig& config, TensorParallelRank tp, int device);
  // A rank's second phase, once every rank of the group is built (allocations done: a blocking free or
  // allocation while a peer GPU waits in a collective for this rank can deadlock the group): one eager
  // prefill of the largest step, so the ops' workspaces reach their prefill sizes now rather than
  // growing inside a later step, then the decode graphs. All ranks at once (the steps have collectives).
  void start_tensor_parallel();
  ~CudaModelRunner() override;

  int64_t num_kv_blocks() const override { return num_kv_blocks_; }
  std::vector<SampledToken> execute(const SchedulerOutput& out) override;
  // Decode steps that replay a graph launch without waiting (model_runner.h); fed steps take their
  // input ids from the previous step's samples on the device (cuda_ops::feed_sampled_tokens).
  bool can_launch(const SchedulerOutput& out) const override;
  void launch(const SchedulerOutput& out, bool fed_from_previous) override;
  std::vector<SampledToken> wait_oldest() override;

 protected:
  OffloadRunner* offload_runner() override { return offload_.get(); }
  const SparseDecodePolicy* decode_policy() const override { return sparse_->decode(); }
  const SparsePrefillAttention* prefill_policy() const override { return sparse_->prefill(); }

 private:
  // The constructors' common part once the model is built (config: the rank's).
  void init(const ModelConfig& config, int64_t tp_size, bool capture_graphs);
  // The checkpoint (with several ranks: this rank's slices of it) in bf16 on the device, then the model.
  void load_model(const std::filesystem::path& model_dir, const ModelConfig& config, TensorParallelRank tp);
  // The model over `weights` (on device_; config: the rank's) and its RoPE table.
  void make_model(const ModelConfig& config, ModelWeights weights, TensorParallelRank tp);
  void allocate_kv_cache(const ModelConfig& config);
  // The ops' execution context: the compute stream and this runner's kernel state.
  ops::Stream ops_stream() { return ops::Stream{stream_, &kernels_}; }
  // Decode batches of up to the largest bucket replay a CUDA graph captured per bucket size.
  int64_t graph_bucket(int64_t num_seqs) const;  // 0: no bucket fits (or graphs are off)
  // `extra`: words the step's input upload copies too (launch(): the sampler's inputs).
  void run_decode_graph(const SchedulerOutput& out, int64_t bucket, int64_t table_stride,
                        cuda_ops::StagedWords extra = {});
  // Block-table row length of a graph batch: the next power of two >= the longest table (min 16), so
  // the per-step H2D copy tracks the real contexts, not max_model_len.
  int64_t graph_table_stride(const SchedulerOutput& out) const;
  static constexpr int64_t kMinGraphTableStride = 16;
  static constexpr int64_t kMaxPrecapturedContext = 32768;  // tokens; longer strides capture on first use
  void capture_decode_graphs();  // every bucket at each stride up to kMaxPrecapturedContext (constructor)
  void run_eager(const SchedulerOutput& out);
  // The packed inputs from pinned staging slot staging_slot_ (a kernel or an H2D copy), and `extra` with
  // them; with step_fed_, the ids fed from the previous step's samples.
  void upload_batch(const ForwardBatch& batch, cuda_ops::StagedWords extra = {});
  // Samples the rows of `out` with sample == true (in `out` order) from the step's logits; syncs.
  std::vector<SampledToken> sample(const SchedulerOutput& out);

  EngineConfig ec_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cuda_ops::DeviceContext kernels_;  // before every buffer it may still use (destroyed after them)
  Buffer rope_inv_freq_;             // [D/2] f32, device
  std::unique_ptr<Decoder> model_;
  Buffer workspace_;                 // decoder activations, device
  DecoderWorkspace ws_;
  int64_t num_kv_blocks_ = 0;
  Buffer kv_storage_;                // per layer K and V [NB, BS, Hk, D] (PagedKvLayout), device
  std::vector<LayerKvCache> kv_;
  int64_t max_batch_ints_ = 0;
  std::array<Buffer, 2> batch_host_;  // packed ForwardBatch ints, pinned: one per launched step in flight
  std::array<void*, 2> batch_host_mapped_{};  // their addresses for kernels (upload_batch)
  static constexpr int64_t kMaxKernelStagedBytes = 64 << 10;  // larger batches: an H2D copy
  int staging_slot_ = 0;              // the batch_host_ (and sampler slot) of the step being launched
  bool step_fed_ = false;             // the step being launched reads ids fed from the previous step
  struct LaunchedStep {
    int slot = 0;
    std::vector<size_t> order;  // row k of the step is out.seqs[order[k]]
  };
  std::deque<LaunchedStep> launched_;                      // oldest first, at most two
  std::unordered_map<int64_t, int32_t> last_step_rows_;  // seq_id -> row in the last launched step
  int next_slot_ = 0;
  Buffer batch_device_;              // its device copy
  std::vector<int64_t> graph_buckets_;             // ascending decode batch sizes with a graph
  int64_t max_table_stride_ = 0;                   // blocks of a max_model_len sequence
  std::unique_ptr<DecodeGraphs> graphs_;
  std::unique_ptr<GpuSampler> sampler_;  // samples on the GPU: only ids (+ logprobs) come back
  std::unique_ptr<OffloadRunner> offload_;  // EngineConfig::offload.enabled; its buffers precede the KV cache
  std::unique_ptr<RunnerSparseAttention> sparse_;  // the paged cache's sparse policies (decode: sized with it)
  AttentionPolicy* eager_policy(const SchedulerOutput& out) const;  // what an eager step's layers call
};

}  // namespace nanovllm
