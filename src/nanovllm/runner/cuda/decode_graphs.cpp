#include "nanovllm/runner/cuda/decode_graphs.h"

#include <algorithm>
#include <vector>

#include "nanovllm/core/env.h"
#include "nanovllm/core/logging.h"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/event_timing.h"
#include "nanovllm/kernels/cuda/linear_tuning.h"

namespace nanovllm {
namespace {

// A timing copy of a padded decode batch: every row attends over `context` cached tokens (blocks 0, 1,
// ... of the cache, whatever they hold; shared by all rows, only read) and stores nothing, so the
// attention costs what it costs in a real step of that context, not one position's worth.
ForwardBatch timing_batch(ForwardBatch b, int64_t context, int64_t num_blocks) {
  const int64_t blocks = std::min({(context + b.block_size - 1) / b.block_size, b.max_blocks_per_seq, num_blocks});
  context = std::min(context, blocks * b.block_size);
  int32_t* d = b.data.data();
  for (int64_t i = 0; i < b.num_seqs; ++i) {
    d[b.positions + i] = static_cast<int32_t>(context - 1);
    d[b.slot_mapping + i] = -1;
    d[b.context_lens + i] = static_cast<int32_t>(context);
    for (int64_t k = 0; k < b.max_blocks_per_seq; ++k)
      d[b.block_tables + i * b.max_blocks_per_seq + k] = static_cast<int32_t>(k < blocks ? k : -1);
  }
  return b;
}

}  // namespace

DecodeGraphs::DecodeGraphs(cudaStream_t stream, cuda_ops::DeviceContext& kernels, Forward forward, Upload upload,
                           bool tune_linear)
    : stream_(stream),
      kernels_(kernels),
      forward_(std::move(forward)),
      upload_(std::move(upload)),
      tune_linear_(tune_linear) {}

DecodeGraphs::~DecodeGraphs() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
}

cudaGraphExec_t DecodeGraphs::get(int64_t bucket, int64_t stride, const DecoderInputs& in, const ForwardBatch& batch,
                                  int64_t num_kv_blocks) {
  auto it = graphs_.find({bucket, stride});
  if (it != graphs_.end()) return it->second;
  // Warm-up run with the capture's exact metadata. It writes the same K/V the replay writes (idempotent).
  forward_(in);
  const cudaGraphExec_t exec = capture_tuned(in, batch, bucket, num_kv_blocks);
  graphs_.emplace(std::make_pair(bucket, stride), exec);
  NANOVLLM_DEBUG("captured decode graph for batch size ", bucket, ", block-table stride ", stride);
  return exec;
}

cudaGraphExec_t DecodeGraphs::capture(const DecoderInputs& in) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  forward_(in);
  CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return exec;
}

// Per-replay ms of two decode graphs, best of 3 alternating rounds of 2 replays (after an untimed one
// each): the variants the tuners compare differ by 0.3-8%, above replay-to-replay noise.
std::array<double, 2> DecodeGraphs::time_graphs(cudaGraphExec_t a, cudaGraphExec_t b) {
  std::array<double, 2> best{1e30, 1e30};
  for (int round = 0; round < 3; ++round)
    for (const int v : {0, 1}) {
      const cudaGraphExec_t g = v == 0 ? a : b;
      const double ms = cuda_ops::average_ms(stream_, 2, [&] { CUDA_CHECK(cudaGraphLaunch(g, stream_)); });
      best[static_cast<size_t>(v)] = std::min(best[static_cast<size_t>(v)], ms);
    }
  return best;
}

cudaGraphExec_t DecodeGraphs::capture_tuned(const DecoderInputs& in, const ForwardBatch& batch, int64_t bucket,
                                            int64_t num_kv_blocks) {
  bool& early = kernels_.options.pdl_early_norm;
  const bool outside = early;  // the setting outside decode graphs, restored at the end
  if (auto it = early_norm_.find(bucket); it != early_norm_.end()) {  // tuned at the bucket's first capture
    early = it->second;
    const cudaGraphExec_t exec = capture(in);
    early = outside;
    return exec;
  }
  // Timed on contexts of 1024 tokens (the latency benchmark's; the decisions are for the bucket at any
  // context), replays storing nothing.
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // the pinned staging buffer's last copy is done
  upload_(timing_batch(batch, 1024, num_kv_blocks));
  cudaGraphExec_t exec = nullptr;
  if (environment().pdl_early_norm < 0 && kernels_.use_pdl()) {
    std::array<cudaGraphExec_t, 2> variant{};  // [early trigger off, on]
    for (const bool on : {false, true}) {
      early = on;
      variant[on] = capture(in);
    }
    const std::array<double, 2> ms = time_graphs(variant[0], variant[1]);
    const bool on = ms[1] <= ms[0];
    CUDA_CHECK(cudaGraphExecDestroy(variant[on ? 0 : 1]));
    exec = variant[on ? 1 : 0];
    early = on;
    NANOVLLM_DEBUG("decode graph, batch ", bucket, ": rms_norm early trigger off ", ms[0], " ms, on ", ms[1],
                   " ms -> ", on ? "on" : "off");
  } else {
    exec = capture(in);
  }
  early_norm_[bucket] = early;
  if (tune_linear_) exec = tune_linear_choices(in, bucket, exec);
  early = outside;
  upload_(batch);  // the step's own inputs back
  return exec;
}

cudaGraphExec_t DecodeGraphs::tune_linear_choices(const DecoderInputs& in, int64_t bucket, cudaGraphExec_t exec) {
  // Options slower alone than this many times the fastest are not tried; at most kMaxTried per shape; a
  // change is kept when the graph gets at least kMinGain faster (replay noise is ~0.1%).
  constexpr float kAloneSlack = 1.3f;
  constexpr int kMaxTried = 3;
  constexpr double kMinGain = 0.003;
  cuda_ops::LinearChoices& choices = kernels_.linear_choices;
  std::vector<cuda_ops::LinearTunable> shapes = choices.tunables(bucket);
  std::stable_sort(shapes.begin(), shapes.end(),
                   [](const auto& a, const auto& b) { return a.shape.n * a.shape.k > b.shape.n * b.shape.k; });
  for (cuda_ops::LinearTunable& sh : shapes) {
    int tried = 0;
    const float fastest = *std::min_element(sh.alone_us.begin(), sh.alone_us.end());
    for (int o = 0; o < static_cast<int>(sh.options.size()) && tried < kMaxTried; ++o) {
      if (o == sh.current || sh.alone_us[static_cast<size_t>(o)] > fastest * kAloneSlack) continue;
      ++tried;
      choices.use_option(sh.shape, o);
      const cudaGraphExec_t candidate = capture(in);
      const std::array<double, 2> ms = time_graphs(exec, candidate);
      const bool keep = ms[1] < ms[0] * (1.0 - kMinGain);
      NANOVLLM_DEBUG("decode graph, batch ", bucket, ", linear N=", sh.shape.n, " K=", sh.shape.k,
                     cuda_ops::linear_fusion_tag(sh.shape.fusion), ": ", sh.options[static_cast<size_t>(sh.current)],
                     " ", ms[0], " ms, ", sh.options[static_cast<size_t>(o)], " ", ms[1], " ms", keep ? " -> kept" : "");
      if (keep) {
        CUDA_CHECK(cudaGraphExecDestroy(exec));
        exec = candidate;
        sh.current = o;
      } else {
        CUDA_CHECK(cudaGraphExecDestroy(candidate));
        choices.use_option(sh.shape, sh.current);
      }
    }
    choices.mark_tuned(sh.shape);
  }
  return exec;
}

}  // namespace nanovllm
