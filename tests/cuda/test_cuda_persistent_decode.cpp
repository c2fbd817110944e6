// The persistent decode kernel (all layers of a bs=1 decode step in one cooperative launch) against the
// layer loop of CUDA ops (Qwen3Model::layer; each op is checked against its CPU reference in the other
// op tests), on random weights and caches: hidden, residual and both KV caches after two consecutive
// decode steps (the second also proves the grid-barrier counters reset between launches), for head_dim
// 64/128/256, GQA 2-8, block sizes 16/256 and contexts on and around block and split boundaries,
// including contexts long enough for several key batches per warp. Plus a DISABLED_ benchmark of the
// Qwen3-0.6B and 8B shapes at context 1024 (graph replays, persistent vs layer loop).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "cuda_test_util.h"
#include "nanovllm/kernels/cuda/cuda_memory.h"
#include "nanovllm/kernels/cuda/persistent_decode.h"
#include "nanovllm/model/qwen3_model.h"
#include "nanovllm/model/rope.h"
#include "nanovllm/runner/cuda/persistent_decode_model.h"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::random_bf16;

struct Shape5 {
  int64_t H, Hq, Hk, D, I, L, block_size;
};

// Random bf16 weights and KV caches on the device for a Qwen3-shaped stack of L layers.
struct RandomStack {
  ModelConfig cfg;
  std::unique_ptr<Qwen3Model> model;
  Buffer inv_freq;
  std::vector<Buffer> caches;  // [L] x (k, v) for the layer loop, then [L] x (k, v) for the persistent kernel
  int64_t num_blocks = 0;

  // random = false (benchmarks): every weight and cache byte 0x3c (bf16 0.0115), much faster to make.
  RandomStack(const Shape5& s, int64_t max_ctx, std::mt19937& rng, bool random = true) {
    cfg.model_type = "qwen3";
    cfg.vocab_size = random ? 64 : 151936;  // benchmarks: the real LM head
    cfg.hidden_size = s.H;
    cfg.intermediate_size = s.I;
    cfg.num_hidden_layers = s.L;
    cfg.num_attention_heads = s.Hq;
    cfg.num_key_value_heads = s.Hk;
    cfg.head_dim = s.D;
    cfg.rms_norm_eps = 1e-6;
    cfg.rope_theta = 1e6;
    cfg.max_position_embeddings = 1 << 20;
    cfg.qk_norm = true;
    ModelWeights w;
    auto upload = [&](Shape shape, float lo, float hi) {
      int64_t n = 1;
      for (int i = 0; i < shape.ndim; ++i) n *= shape[i];
      Buffer b(cuda_allocator(0), DType::kBF16, shape);
      if (random) {
        const auto data = random_bf16(static_cast<size_t>(n), rng, lo, hi);
        CUDA_CHECK(cudaMemcpy(b.data(), data.bits.data(), b.nbytes(), cudaMemcpyHostToDevice));
      } else {
        CUDA_CHECK(cudaMemset(b.data(), 0x3c, b.nbytes()));
      }
      w.storage.push_back(std::move(b));
      return w.storage.back().view();
    };
    const float sh = 1.0f / std::sqrt(static_cast<float>(s.H)), so = 1.0f / std::sqrt(static_cast<float>(s.Hq * s.D)),
                si = 1.0f / std::sqrt(static_cast<float>(s.I));
    w.embed_tokens = upload({cfg.vocab_size, s.H}, -1.0f, 1.0f);
    w.lm_head = w.embed_tokens;
    w.norm = upload({s.H}, 0.8f, 1.2f);
    for (int64_t l = 0; l < s.L; ++l) {
      LayerWeights lw;
      lw.input_layernorm = upload({s.H}, 0.8f, 1.2f);
      lw.qkv_proj = upload({(s.Hq + 2 * s.Hk) * s.D, s.H}, -1.7f * sh, 1.7f * sh);
      lw.q_norm = upload({s.D}, 0.8f, 1.2f);
      lw.k_norm = upload({s.D}, 0.8f, 1.2f);
      lw.o_proj = upload({s.H, s.Hq * s.D}, -1.7f * so, 1.7f * so);
      lw.post_attention_layernorm = upload({s.H}, 0.8f, 1.2f);
      lw.gate_up_proj = upload({2 * s.I, s.H}, -1.7f * sh, 1.7f * sh);
      lw.down_proj = upload({s.H, s.I}, -1.7f * si, 1.7f * si);
      w.layers.push_back(lw);
    }
    const RopeTable rope = compute_rope(cfg);
    inv_freq = Buffer(cuda_allocator(0), DType::kF32, Shape{static_cast<int64_t>(rope.inv_freq.size())});
    CUDA_CHECK(cudaMemcpy(inv_freq.data(), rope.inv_freq.data(), inv_freq.nbytes(), cudaMemcpyHostToDevice));
    model = std::make_unique<Qwen3Model>(cfg, std::move(w), inv_freq.view(), rope.attention_scaling);

    // Two identical copies of every layer's caches (random old keys everywhere): caches[2 l + kv] for the
    // layer loop, caches[2 (L + l) + kv] for the persistent kernel.
    num_blocks = (max_ctx + s.block_size - 1) / s.block_size + 3;
    const Shape cs{num_blocks, s.block_size, s.Hk, s.D};
    std::vector<Buffer> persistent_copies;
    for (int64_t i = 0; i < 2 * s.L; ++i) {
      caches.emplace_back(cuda_allocator(0), DType::kBF16, cs);
      persistent_copies.emplace_back(cuda_allocator(0), DType::kBF16, cs);
      if (!random) {
        CUDA_CHECK(cudaMemset(caches.back().data(), 0x3c, caches.back().nbytes()));
        CUDA_CHECK(cudaMemset(persistent_copies.back().data(), 0x3c, caches.back().nbytes()));
        continue;
      }
      const auto data = random_bf16(static_cast<size_t>(num_blocks * s.block_size * s.Hk * s.D), rng, -2.0f, 2.0f);
      CUDA_CHECK(cudaMemcpy(caches.back().data(), data.bits.data(), data.bits.size() * 2, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(persistent_copies.back().data(), data.bits.data(), data.bits.size() * 2, cudaMemcpyHostToDevice));
    }
    for (Buffer& b : persistent_copies) caches.push_back(std::move(b));
  }

  // The layer loop's caches (copy 0) or the persistent kernel's (copy 1).
  std::vector<LayerKvCache> kv_copy(int64_t copy) const {
    const int64_t L = cfg.num_hidden_layers;
    std::vector<LayerKvCache> kv;
    for (int64_t l = 0; l < L; ++l) kv.push_back({caches[2 * (copy * L + l)].view(), caches[2 * (copy * L + l) + 1].view()});
    return kv;
  }

  cuda_ops::PersistentDecodeModel persistent_model() const { return persistent_decode_model(*model, kv_copy(1)); }
};

// One sequence decoding one token at position ctx - 1 (its K/V go to the table's slot for it).
struct DecodeStep {
  DeviceTensor cu{DType::kI32, {2}}, ctx_lens{DType::kI32, {1}}, table, slots{DType::kI32, {1}},
      positions{DType::kI32, {1}};
  AttentionMetadata meta;

  DecodeStep(const std::vector<int32_t>& block_table, int64_t block_size, int32_t ctx)
      : table(DType::kI32, {1, static_cast<int64_t>(block_table.size())}, block_table) {
    const int32_t pos = ctx - 1;
    const int32_t slot = block_table[static_cast<size_t>(pos / block_size)] * static_cast<int32_t>(block_size) +
                         static_cast<int32_t>(pos % block_size);
    put(cu, std::vector<int32_t>{0, 1});
    put(ctx_lens, std::vector<int32_t>{ctx});
    put(slots, std::vector<int32_t>{slot});
    put(positions, std::vector<int32_t>{pos});
    meta.num_seqs = 1;
    meta.num_tokens = 1;
    meta.max_query_len = 1;
    meta.max_context_len = ctx;
    meta.cu_seqlens_q = cu.view();
    meta.context_lens = ctx_lens.view();
    meta.block_tables = table.view();
    meta.slot_mapping = slots.view();
    meta.block_size = block_size;
    meta.num_leading_decodes = 1;
  }
  static void put(DeviceTensor& t, const std::vector<int32_t>& v) {
    CUDA_CHECK(cudaMemcpy(t.view().data(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  }
};

std::vector<float> download_f32(const TensorView& t) {
  std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(bits.data(), t.data(), bits.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) f[i] = bf16_to_f32(bits[i]);
  return f;
}

void check_against_layer_loop(const Shape5& s, const std::vector<int32_t>& contexts, uint32_t seed) {
  std::mt19937 rng(seed);
  const int32_t max_ctx = *std::max_element(contexts.begin(), contexts.end()) + 1;
  RandomStack stack(s, max_ctx, rng);
  const std::string why = cuda_ops::persistent_decode_unsupported(stack.persistent_model(), 0);
  if (!why.empty()) GTEST_SKIP() << why;
  cuda_ops::PersistentDecoder decoder(stack.persistent_model(), 0);

  size_t ws_bytes = 0;
  Qwen3Model::make_workspace(stack.cfg, DType::kBF16, nullptr, Device::cuda(0), 1, 1, &ws_bytes);
  Buffer arena(cuda_allocator(0), ws_bytes);
  const DecoderWorkspace ws = Qwen3Model::make_workspace(stack.cfg, DType::kBF16, arena.data(), Device::cuda(0), 1, 1);
  DeviceTensor hidden(DType::kBF16, {1, s.H}), residual(DType::kBF16, {1, s.H});
  const std::vector<LayerKvCache> kv = stack.kv_copy(0);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  // A shuffled block table covering the longest context.
  std::vector<int32_t> table(static_cast<size_t>(stack.num_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);

  for (const int32_t ctx0 : contexts) {
    for (const int32_t ctx : {ctx0, ctx0 + 1}) {  // two consecutive decode steps
      const std::string what = "D=" + std::to_string(s.D) + " G=" + std::to_string(s.Hq / s.Hk) + " bs=" +
                               std::to_string(s.block_size) + " ctx=" + std::to_string(ctx);
      DecodeStep step(table, s.block_size, ctx);
      const auto x = random_bf16(static_cast<size_t>(s.H), rng, -1.0f, 1.0f);
      CUDA_CHECK(cudaMemcpy(ws.hidden.data(), x.bits.data(), x.bits.size() * 2, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(hidden.view().data(), x.bits.data(), x.bits.size() * 2, cudaMemcpyHostToDevice));
      residual.fill_bytes(0xff);  // NaN poison: layer 0 must not read it

      DecoderInputs in;
      in.positions = step.positions.view();
      in.attn = step.meta;
      for (int64_t l = 0; l < s.L; ++l) stack.model->layer(l, in, kv[static_cast<size_t>(l)], ws, ops::Stream{st});
      decoder.run(hidden.view(), residual.view(), step.positions.view(), step.meta, st);
      CUDA_CHECK(cudaStreamSynchronize(st));

      // The same roundings at the same points; what differs is fp32 summation order (an occasional bf16
      // rounding flip, carried through the layers).
      const auto ref_h = download_f32(ws.hidden.slice_rows(0, 1)), ref_r = download_f32(ws.residual.slice_rows(0, 1));
      const auto got_h = hidden.download_f32(), got_r = residual.download_f32();
      EXPECT_LT(cuda_test::nmse(got_h, ref_h), 2e-4) << what << " hidden";
      EXPECT_LT(cuda_test::nmse(got_r, ref_r), 2e-4) << what << " residual";
      cuda_test::expect_close(got_r, ref_r, 5e-2f, 2e-2f, what + " residual");
      for (int64_t l = 0; l < s.L; ++l) {
        for (int64_t c = 0; c < 2; ++c) {
          const auto ref_c = download_f32(stack.caches[static_cast<size_t>(2 * l + c)].view());
          const auto got_c = download_f32(stack.caches[static_cast<size_t>(2 * (s.L + l) + c)].view());
          cuda_test::expect_close(got_c, ref_c, 2e-2f, 2e-2f,
                                  what + " layer " + std::to_string(l) + (c == 0 ? " k cache" : " v cache"));
        }
      }
      if (::testing::Test::HasFailure()) break;
    }
  }
  CUDA_CHECK(cudaStreamDestroy(st));
}

TEST(CudaPersistentDecode, HeadDim64Gqa2Block16) {
  SKIP_WITHOUT_CUDA();
  check_against_layer_loop({256, 4, 2, 64, 704, 2, 16}, {1, 15, 16, 17, 129, 257}, 21);
}

TEST(CudaPersistentDecode, HeadDim128Gqa2Block256Qwen3Small) {
  SKIP_WITHOUT_CUDA();
  // 0.6B's heads and widths, 2 layers; 3000 keys: several key batches per warp.
  check_against_layer_loop({1024, 16, 8, 128, 3072, 2, 256}, {1, 255, 256, 257, 1024, 3000}, 22);
}

TEST(CudaPersistentDecode, Qwen3_8BWidthsOneLayer) {
  SKIP_WITHOUT_CUDA();
  // Slices of many pieces (rows of 4,096 and 12,288: 1-3 rows per piece, 11-32 pieces per slice).
  check_against_layer_loop({4096, 32, 8, 128, 12288, 1, 256}, {1, 1024}, 28);
}

TEST(CudaPersistentDecode, HeadDim128Gqa4OddWidths) {
  SKIP_WITHOUT_CUDA();
  check_against_layer_loop({520, 8, 2, 128, 1368, 3, 16}, {2, 31, 33, 500}, 23);
}

TEST(CudaPersistentDecode, HeadDim256Gqa2) {
  SKIP_WITHOUT_CUDA();
  check_against_layer_loop({512, 4, 2, 256, 1000, 1, 16}, {5, 16, 300}, 24);
}

TEST(CudaPersistentDecode, HeadDim64Gqa8) {
  SKIP_WITHOUT_CUDA();
  check_against_layer_loop({384, 16, 2, 64, 1032, 2, 16}, {3, 64, 700}, 27);
}

TEST(CudaPersistentDecode, UnsupportedShapesSayWhy) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(25);
  RandomStack stack({256, 4, 2, 64, 704, 1, 16}, 64, rng);
  cuda_ops::PersistentDecodeModel m = stack.persistent_model();
  m.head_dim = 96;
  EXPECT_FALSE(cuda_ops::persistent_decode_unsupported(m, 0).empty());
  m = stack.persistent_model();
  m.heads = 16;  // GQA group 8 at head_dim 128: the attention scratch does not fit
  m.head_dim = 128;
  EXPECT_NE(cuda_ops::persistent_decode_unsupported(m, 0).find("attention scratch"), std::string::npos);
  m = stack.persistent_model();
  m.layers[0].qkv_proj = m.layers[0].o_proj;  // wrong shape
  EXPECT_NE(cuda_ops::persistent_decode_unsupported(m, 0).find("shapes"), std::string::npos);
  EXPECT_THROW(cuda_ops::PersistentDecoder(m, 0), Error);
}

// ---- Benchmark: all layers of a bs=1 decode step at context 1024, graph replays (L2-cold: the weights
// exceed L2), persistent kernel vs the layer loop.
void bench_shape(const char* name, const Shape5& s) {
  std::mt19937 rng(26);
  const int32_t ctx = 1024;
  RandomStack stack(s, ctx + 1, rng, /*random=*/false);
  cuda_ops::PersistentDecoder decoder(stack.persistent_model(), 0);
  size_t ws_bytes = 0;
  Qwen3Model::make_workspace(stack.cfg, DType::kBF16, nullptr, Device::cuda(0), 1, 1, &ws_bytes);
  Buffer arena(cuda_allocator(0), ws_bytes);
  const DecoderWorkspace ws = Qwen3Model::make_workspace(stack.cfg, DType::kBF16, arena.data(), Device::cuda(0), 1, 1);
  const std::vector<LayerKvCache> kv = stack.kv_copy(0);
  std::vector<int32_t> table(static_cast<size_t>(stack.num_blocks));
  std::iota(table.begin(), table.end(), 0);
  DecodeStep step(table, s.block_size, ctx);
  DecoderInputs in;
  in.positions = step.positions.view();
  in.attn = step.meta;
  DeviceTensor ids(DType::kI32, {1}, std::vector<int32_t>{7}), rows(DType::kI32, {1}, std::vector<int32_t>{0});
  in.input_ids = ids.view();
  in.sample_rows = rows.view();
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  auto capture = [&](auto&& body) { return cuda_test::warm_up_and_capture(st, body); };
  cudaGraphExec_t loop = capture([&] {
    for (int64_t l = 0; l < s.L; ++l) stack.model->layer(l, in, kv[static_cast<size_t>(l)], ws, ops::Stream{st});
  });
  cudaGraphExec_t persistent =
      capture([&] { decoder.run(ws.hidden.slice_rows(0, 1), ws.residual.slice_rows(0, 1), step.positions.view(), step.meta, st); });
  // The whole step (embedding, layers, final norm, LM head) both ways: what the runner's graph holds.
  cudaGraphExec_t step_loop = capture([&] { stack.model->forward(in, kv, ws, ops::Stream{st}); });
  cudaGraphExec_t step_persistent = capture([&] {
    stack.model->embed(in, ws, ops::Stream{st});
    decoder.run(ws.hidden.slice_rows(0, 1), ws.residual.slice_rows(0, 1), step.positions.view(), step.meta, st);
    stack.model->head(in, ws, ops::Stream{st});
  });
  for (int round = 0; round < 2; ++round) {
    const auto a = cuda_test::graph_replay_ms(step_loop, st, 50), b = cuda_test::graph_replay_ms(step_persistent, st, 50);
    std::printf("%s whole step: layer loop %.1f us, persistent %.1f us\n", name, a[a.size() / 2] * 1e3, b[b.size() / 2] * 1e3);
  }
  CUDA_CHECK(cudaGraphExecDestroy(step_loop));
  CUDA_CHECK(cudaGraphExecDestroy(step_persistent));
  for (int round = 0; round < 2; ++round) {
    const auto a = cuda_test::graph_replay_ms(loop, st, 50), b = cuda_test::graph_replay_ms(persistent, st, 50);
    std::printf("%s, %lld layers, ctx %d: layer loop %.1f us (%.2f us/layer), persistent %.1f us (%.2f us/layer)\n",
                name, static_cast<long long>(s.L), ctx, a[a.size() / 2] * 1e3, a[a.size() / 2] * 1e3 / s.L,
                b[b.size() / 2] * 1e3, b[b.size() / 2] * 1e3 / s.L);
  }
  // CTA 0's trace of one eager launch: mean time per step of a layer (and, in brackets, of it waiting
  // for weight pieces), over the layers.
  constexpr int kMarks = cuda_ops::PersistentDecoder::kTraceMarks;
  const size_t n_stamps = static_cast<size_t>(1 + 2 * kMarks * s.L);
  DeviceTensor stamps(DType::kU8, {static_cast<int64_t>(n_stamps * 8)});
  decoder.set_trace(static_cast<unsigned long long*>(stamps.view().data()));
  decoder.run(ws.hidden.slice_rows(0, 1), ws.residual.slice_rows(0, 1), step.positions.view(), step.meta, st);
  CUDA_CHECK(cudaStreamSynchronize(st));
  decoder.set_trace(nullptr);
  const std::vector<unsigned long long> t = stamps.download<unsigned long long>();
  const char* names[kMarks] = {"norm", "qkv", "keys", "bar", "attention", "bar", "o-in", "o", "bar",
                               "norm", "gate_up", "bar", "down-in", "down", "bar"};
  std::printf("%s CTA-0 trace, us per layer:", name);
  double layer_total = 0;
  for (int m = 0; m < kMarks; ++m) {
    double dt = 0, starved = 0;
    for (int64_t l = 0; l < s.L; ++l) {
      const size_t k = 1 + 2 * static_cast<size_t>(kMarks * l + m);
      dt += static_cast<double>(t[k] - (k == 1 ? t[0] : t[k - 2]));
      starved += static_cast<double>(t[k + 1]);
    }
    layer_total += dt / s.L;
    std::printf(" %s %.2f", names[m], dt / s.L / 1e3);
    if (starved > 0) std::printf(" [%.2f]", starved / s.L / 1.98e3);  // SM cycles at ~1.98 GHz
    std::printf(";");
  }
  std::printf(" = %.1f; launch total %.1f us\n", layer_total / 1e3, static_cast<double>(t[n_stamps - 2] - t[0]) / 1e3);
  CUDA_CHECK(cudaGraphExecDestroy(loop));
  CUDA_CHECK(cudaGraphExecDestroy(persistent));
  CUDA_CHECK(cudaStreamDestroy(st));
}

TEST(CudaPersistentDecodeBench, DISABLED_Layers) {
  SKIP_WITHOUT_CUDA();
  bench_shape("Qwen3-0.6B", {1024, 16, 8, 128, 3072, 28, 256});
  // One layer: its 31.5 MB of weights stay in L2 across replays (what a perfect L2 prefetch would give).
  bench_shape("Qwen3-0.6B, 1 layer, L2-resident", {1024, 16, 8, 128, 3072, 1, 256});
  bench_shape("Qwen3-8B", {4096, 32, 8, 128, 12288, 36, 256});
}

}  // namespace
}  // namespace nanovllm
