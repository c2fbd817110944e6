// CUDA qkv_prologue and paged_attention against the CPU reference kernels.
// Inputs are random bf16 (the reference gets their exact fp32 values); block tables are shuffled
// permutations of the cache blocks; context lengths sit on and around block boundaries; batches mix
// full prefills, prefix-cached prefills (context > query length) and decodes.
// Tolerances: outputs are bf16 of fp32 math (one rounding, <= 2^-8 relative), attention outputs are
// convex combinations of V rows in [-1, 1]: atol 1e-2 + rtol 5e-3 per element.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>

#include "cuda_test_util.h"

#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::graph_replay_ms;
using cuda_test::time_each_ms;
using cuda_test::expect_close;
using cuda_test::random_bf16;

constexpr float kAtol = 1e-2f, kRtol = 5e-3f;

// KernelOptions::prefill_wgmma = false for the scope: the prefill dispatch skips the sm_90a wgmma kernel
// and runs the mma.sync kernel (attention_prefill_tc.cu), so both stay covered on Hopper. (Elsewhere the
// wgmma kernel is never used and both settings test the mma.sync kernel.)
struct ScopedPrefillPath : cuda_test::RestoreOptions {
  explicit ScopedPrefillPath(bool wgmma) { cuda_test::context().options.prefill_wgmma = wgmma; }
};

// A batch: per sequence (query length, context length).
struct Batch {
  std::vector<int32_t> qlen, ctx;
};

struct BatchMeta {
  int64_t T = 0, S = 0, max_blocks = 0, max_q = 0, max_ctx = 0;
  int64_t leading_decodes = 0;  // sequences before the first one with query length != 1
  std::vector<int32_t> cu, ctx, bt, slots, positions;
};

// Shuffled block tables over NB blocks; slot mapping and positions for this step's tokens.
BatchMeta make_meta(const Batch& b, int64_t BS, int64_t NB, std::mt19937& rng, int64_t min_blocks = 0) {
  BatchMeta m;
  m.max_blocks = min_blocks;
  m.S = static_cast<int64_t>(b.qlen.size());
  m.cu.push_back(0);
  for (int64_t s = 0; s < m.S; ++s) {
    m.cu.push_back(m.cu.back() + b.qlen[static_cast<size_t>(s)]);
    m.max_blocks = std::max<int64_t>(m.max_blocks, (b.ctx[static_cast<size_t>(s)] + BS - 1) / BS);
    m.max_q = std::max<int64_t>(m.max_q, b.qlen[static_cast<size_t>(s)]);
    m.max_ctx = std::max<int64_t>(m.max_ctx, b.ctx[static_cast<size_t>(s)]);
  }
  m.T = m.cu.back();
  m.ctx = b.ctx;
  while (m.leading_decodes < m.S && b.qlen[static_cast<size_t>(m.leading_decodes)] == 1) ++m.leading_decodes;
  std::vector<int32_t> perm(static_cast<size_t>(NB));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  m.bt.assign(static_cast<size_t>(m.S * m.max_blocks), -1);
  size_t next = 0;
  for (int64_t s = 0; s < m.S; ++s) {
    const int64_t nb = (b.ctx[static_cast<size_t>(s)] + BS - 1) / BS;
    for (int64_t j = 0; j < nb; ++j) m.bt[static_cast<size_t>(s * m.max_blocks + j)] = perm.at(next++);
    for (int32_t t = m.cu[static_cast<size_t>(s)]; t < m.cu[static_cast<size_t>(s) + 1]; ++t) {
      const int32_t pos = b.ctx[static_cast<size_t>(s)] - (m.cu[static_cast<size_t>(s) + 1] - t);
      m.positions.push_back(pos);
      m.slots.push_back(m.bt[static_cast<size_t>(s * m.max_blocks + pos / BS)] * static_cast<int32_t>(BS) +
                        pos % static_cast<int32_t>(BS));
    }
  }
  return m;
}

// The fields these tests set; the rest keep their defaults.
AttentionMetadata paged_meta(const BatchMeta& m, TensorView cu, TensorView ctx, TensorView bt, TensorView slots,
                             int64_t BS) {
  AttentionMetadata a;
  a.num_seqs = m.S;
  a.num_tokens = m.T;
  a.max_query_len = m.max_q;
  a.max_context_len = m.max_ctx;
  a.cu_seqlens_q = cu;
  a.context_lens = ctx;
  a.block_tables = bt;
  a.slot_mapping = slots;
  a.block_size = BS;
  a.num_leading_decodes = m.leading_decodes;
  return a;
}

struct DeviceMeta {
  DeviceTensor cu, ctx, bt, slots;
  AttentionMetadata meta;
  DeviceMeta(BatchMeta& m, int64_t BS)
      : cu(DType::kI32, {m.S + 1}, m.cu), ctx(DType::kI32, {m.S}, m.ctx), bt(DType::kI32, {m.S, m.max_blocks}, m.bt),
        slots(DType::kI32, {m.T}, m.slots) {
    meta = paged_meta(m, cu.view(), ctx.view(), bt.view(), slots.view(), BS);
  }
};
AttentionMetadata host_meta(BatchMeta& m, int64_t BS) {
  return paged_meta(m, cuda_test::host_view(m.cu, {m.S + 1}), cuda_test::host_view(m.ctx, {m.S}),
                    cuda_test::host_view(m.bt, {m.S, m.max_blocks}), cuda_test::host_view(m.slots, {m.T}), BS);
}

// `meta_max_ctx` > 0 overrides meta.max_context_len (CUDA graphs size launches for max_model_len);
// `launches` > 1 runs the op again on the same inputs (split arrival counters must be back at zero).
// Random q / K / V for batch `b` (host copies for the CPU reference, device tensors for the op) and its
// metadata: blocks shuffled over a cache of NB = the batch's blocks + 3 spare ones the tables never name.
struct AttentionCase {
  int64_t NB;
  BatchMeta m;
  cuda_test::Bf16Data q, kc, vc;  // [T, Hq, D], [NB, BS, Hk, D] x 2
  DeviceTensor d_q, d_out, d_k, d_v;
  DeviceMeta dm;
  AttentionCase(const Batch& b, int64_t Hq, int64_t Hk, int64_t D, int64_t BS, std::mt19937& rng)
      : NB(cache_blocks(b, BS)),
        m(make_meta(b, BS, NB, rng)),
        q(random_bf16(static_cast<size_t>(m.T * Hq * D), rng, -2.0f, 2.0f)),
        kc(random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng, -2.0f, 2.0f)),
        vc(random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng)),
        d_q(DType::kBF16, {m.T, Hq, D}, q.bits),
        d_out(DType::kBF16, {m.T, Hq, D}),
        d_k(DType::kBF16, {NB, BS, Hk, D}, kc.bits),
        d_v(DType::kBF16, {NB, BS, Hk, D}, vc.bits),
        dm(m, BS) {}
  static int64_t cache_blocks(const Batch& b, int64_t BS) {
    int64_t blocks = 0;
    for (int32_t c : b.ctx) blocks += (c + BS - 1) / BS;
    return blocks + 3;
  }
  void run(float scale) {
    cuda_ops::paged_attention(d_out.view(), d_q.view(), d_k.view(), d_v.view(), dm.meta, scale, cuda_test::on());
  }
};

void check_attention(const Batch& b, int64_t Hq, int64_t Hk, int64_t D, int64_t BS, uint32_t seed,
                     int64_t meta_max_ctx = 0, int launches = 1) {
  std::mt19937 rng(seed);
  AttentionCase c(b, Hq, Hk, D, BS, rng);
  const int64_t NB = c.NB;
  BatchMeta& m = c.m;
  DeviceMeta& dm = c.dm;
  if (meta_max_ctx > 0) dm.meta.max_context_len = meta_max_ctx;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> ref(static_cast<size_t>(m.T * Hq * D));
  cpu::paged_attention(cuda_test::host_view(ref, {m.T, Hq, D}), cuda_test::host_view(c.q.f32, {m.T, Hq, D}),
                       cuda_test::host_view(c.kc.f32, {NB, BS, Hk, D}), cuda_test::host_view(c.vc.f32, {NB, BS, Hk, D}),
                       host_meta(m, BS), scale);
  std::string what = "attention Hq=" + std::to_string(Hq) + " Hk=" + std::to_string(Hk) + " D=" + std::to_string(D) +
                     " BS=" + std::to_string(BS) + " seqs:";
  for (size_t s = 0; s < b.qlen.size(); ++s) what += " (" + std::to_string(b.qlen[s]) + "," + std::to_string(b.ctx[s]) + ")";
  if (meta_max_ctx > 0) what += " max_context_len=" + std::to_string(meta_max_ctx);
  // A mixed batch that starts with decodes runs both ways: leading decodes through the decode kernel,
  // and (num_leading_decodes = 0) everything through the prefill kernel.
  std::vector<int64_t> leading{m.leading_decodes};
  if (m.leading_decodes > 0 && m.max_q > 1) leading.push_back(0);
  for (const int64_t lead : leading) {
    dm.meta.num_leading_decodes = lead;
    std::vector<float> got;
    for (int i = 0; i < launches; ++i) {
      c.d_out.fill_bytes(0xff);
      c.run(scale);
      std::vector<float> now = c.d_out.download_f32();
      if (i > 0) {  // same inputs, same launch: bit-identical
        ASSERT_EQ(std::memcmp(now.data(), got.data(), now.size() * sizeof(float)), 0) << "launch " << i << " differs";
      }
      got = std::move(now);
    }
    expect_close(got, ref, kAtol, kRtol, what + " num_leading_decodes=" + std::to_string(lead));
  }
}

TEST(CudaAttention, DecodeBatchesAroundBlockBoundaries) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 100;
  for (int64_t BS : {16, 256}) {
    for (int64_t D : {64, 128}) {
      for (int64_t G : {1, 2, 4, 8}) {
        Batch b;
        for (int32_t c : {1, static_cast<int32_t>(BS - 1), static_cast<int32_t>(BS), static_cast<int32_t>(BS + 1), 257, 1000}) {
          b.qlen.push_back(1);
          b.ctx.push_back(c);
        }
        check_attention(b, 2 * G, 2, D, BS, seed++);
      }
    }
  }
}

TEST(CudaAttention, DecodeLongContextUsesSplits) {
  SKIP_WITHOUT_CUDA();
  // One or two sequences with few KV heads: the split-KV path (several splits + combine) is taken.
  check_attention(Batch{{1}, {5000}}, 8, 1, 128, 16, 7);
  check_attention(Batch{{1, 1}, {4097, 300}}, 16, 2, 128, 256, 8);
  check_attention(Batch{{1}, {3000}}, 4, 4, 64, 16, 9);
  check_attention(Batch{{1}, {2049}}, 32, 2, 128, 16, 10);  // G = 16: IT 16
  check_attention(Batch{{1}, {1500}}, 16, 2, 256, 16, 11);  // D = 256
}

// Tensor-core decode (head_dim 64 / 128): GQA groups packed as MMA rows (1..16, larger groups in
// chunks of 16), 16-key warp tiles gathered row by row through the block table (any block size),
// context lengths around the 16-key tile, the 64-key split granule and block boundaries.
TEST(CudaAttention, DecodeTensorCoreGroupsAndBlockSizes) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 1000;
  const std::vector<int32_t> ctxs{1, 2, 15, 16, 17, 63, 64, 65, 127, 129, 200, 1000};
  for (int64_t D : {64, 128}) {
    for (int64_t G : {1, 3, 5, 12, 16, 24, 32}) {
      check_attention(Batch{std::vector<int32_t>(ctxs.size(), 1), ctxs}, 2 * G, 2, D, 16, seed++);
    }
    for (int64_t BS : {1, 8, 48, 128}) {
      check_attention(Batch{std::vector<int32_t>(ctxs.size(), 1), ctxs}, 8, 2, D, BS, seed++);
    }
  }
}

// Splits are chosen per sequence on the device: with meta.max_context_len far above the real lengths
// (a graph captured for max_model_len) short sequences take few splits and the rest of the grid's split
// slots exit (or, in a combining cluster, idle through the combine); long ones in the same batch still
// split. Runs the op three times on the same inputs: bit-identical outputs, and the global combine's
// arrival counters must be back at zero after each launch.
void check_device_chosen_splits() {
  uint32_t seed = 1100;
  check_attention(Batch{{1}, {1024}}, 16, 8, 128, 16, seed++, 40960, 3);      // Qwen3-0.6B, bs 1
  check_attention(Batch{{1}, {1024}}, 16, 8, 128, 16, seed++, 1024, 3);
  check_attention(Batch{{1, 1, 1, 1, 1, 1, 1, 1}, {1, 5, 64, 65, 700, 1024, 3000, 9000}}, 16, 8, 128, 16, seed++,
                  40960, 3);
  check_attention(Batch{{1, 1, 1}, {4097, 33, 2500}}, 8, 1, 128, 16, seed++, 40960, 3);  // Hk 1: 32 split slots
  check_attention(Batch{{1, 1}, {5000, 77}}, 4, 1, 64, 32, seed++, 8192, 3);
  check_attention(Batch{{1, 1}, {3001, 129}}, 32, 1, 128, 16, seed++, 4096, 3);  // G 32: two head chunks
  // A batch too large to split (one split slot): every sequence writes its output directly.
  Batch big;
  std::mt19937 rng(seed++);
  for (int s = 0; s < 300; ++s) {
    big.qlen.push_back(1);
    big.ctx.push_back(1 + static_cast<int32_t>(rng() % 700));
  }
  check_attention(big, 16, 8, 128, 16, seed++, 40960, 2);
}

struct ClusterCombineGuard : cuda_test::RestoreOptions {
  explicit ClusterCombineGuard(bool on) { cuda_test::context().options.decode_cluster_combine = on; }
};

// Default: on sm_90 the splits combine in a thread-block cluster (distributed shared memory).
TEST(CudaAttention, DecodeSplitsFollowDeviceContextLengths) {
  SKIP_WITHOUT_CUDA();
  check_device_chosen_splits();
}

// The same batches with the splits combined through global memory (partials, arrival counter, last CTA
// merges): the path of devices without clusters, kept tested on sm_90.
TEST(CudaAttention, DecodeSplitsGlobalCombine) {
  SKIP_WITHOUT_CUDA();
  ClusterCombineGuard guard(false);
  check_device_chosen_splits();
  check_attention(Batch{{1}, {5000}}, 8, 1, 128, 16, 7);  // up to 32 split slots
}

// Both combines merge the same partials in the same order, so with the same split count (<= 16, the
// cluster limit) their outputs are bit-identical. Without clusters (before sm_90) both runs take the
// global path, so the test only means something on sm_90.
TEST(CudaAttention, DecodeClusterCombineMatchesGlobalBitwise) {
  SKIP_WITHOUT_CUDA();
  if (cuda_test::device_major() < 9) GTEST_SKIP() << "thread-block clusters need sm_90";
  struct Shape {
    Batch b;
    int64_t Hq, Hk, D, BS;
  };
  // Split counts: 16 (bs 1 @ 1024, Hk 8), 16 / 1-16 per sequence (bs 4), 11 (D 64), 16 (G 4, BS 256).
  const std::vector<Shape> shapes{{Batch{{1}, {1024}}, 16, 8, 128, 16},
                                  {Batch{{1, 1, 1, 1}, {1000, 1, 65, 999}}, 16, 8, 128, 16},
                                  {Batch{{1, 1}, {700, 300}}, 16, 8, 64, 16},
                                  {Batch{{1}, {1023}}, 32, 8, 128, 256}};
  std::mt19937 rng(1300);
  for (const Shape& sh : shapes) {
    AttentionCase c(sh.b, sh.Hq, sh.Hk, sh.D, sh.BS, rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(sh.D));
    std::vector<float> out[2];
    for (const bool cluster : {true, false}) {
      ClusterCombineGuard guard(cluster);
      c.d_out.fill_bytes(0xff);
      c.run(scale);
      out[cluster ? 0 : 1] = c.d_out.download_f32();
    }
    ASSERT_EQ(std::memcmp(out[0].data(), out[1].data(), out[0].size() * sizeof(float)), 0)
        << "Hq=" << sh.Hq << " Hk=" << sh.Hk << " D=" << sh.D << " BS=" << sh.BS;
  }
}

// Decode captured once in a CUDA graph (max_context_len fixed at capture, as the runner does) and
// replayed with new context lengths and block tables written into the same buffers; each metadata set is
// replayed twice (the fused combine's counters reset themselves inside the graph).
TEST(CudaAttention, DecodeGraphReplayFollowsContextLengths) {
  SKIP_WITHOUT_CUDA();
  for (int64_t D : {64, 128}) {
    const int64_t Hq = 16, Hk = 8, BS = 16, kMaxCtx = 8192;
    const int64_t width = kMaxCtx / BS;  // block-table columns, fixed for the graph
    const std::vector<Batch> rounds{Batch{{1, 1, 1, 1}, {1000, 1, 4000, 8192}},
                                    Batch{{1, 1, 1, 1}, {64, 65, 8000, 300}},
                                    Batch{{1, 1, 1, 1}, {1024, 1024, 1024, 1024}},
                                    Batch{{1, 1, 1, 1}, {17, 2, 3, 129}}};
    std::mt19937 rng(1200 + static_cast<uint32_t>(D));
    const int64_t NB = 4 * width + 3;
    std::vector<BatchMeta> metas;
    for (const Batch& b : rounds) metas.push_back(make_meta(b, BS, NB, rng, width));
    for (const BatchMeta& m : metas) ASSERT_EQ(m.max_blocks, width);
    const int64_t T = 4;
    auto q = random_bf16(static_cast<size_t>(T * Hq * D), rng, -2.0f, 2.0f);
    auto kc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng, -2.0f, 2.0f);
    auto vc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng);
    DeviceTensor d_q(DType::kBF16, {T, Hq, D}, q.bits), d_out(DType::kBF16, {T, Hq, D});
    DeviceTensor d_k(DType::kBF16, {NB, BS, Hk, D}, kc.bits), d_v(DType::kBF16, {NB, BS, Hk, D}, vc.bits);
    DeviceMeta dm(metas[0], BS);
    dm.meta.max_context_len = kMaxCtx;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    // warm-up outside capture (function attributes, split workspace), then capture
    cuda_ops::paged_attention(d_out.view(), d_q.view(), d_k.view(), d_v.view(), dm.meta, scale, cuda_test::on(st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    cuda_ops::paged_attention(d_out.view(), d_q.view(), d_k.view(), d_v.view(), dm.meta, scale, cuda_test::on(st));
    CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (size_t round = 0; round < metas.size(); ++round) {
      BatchMeta& m = metas[round];
      auto upload = [](const DeviceTensor& t, const std::vector<int32_t>& h) {
        CUDA_CHECK(cudaMemcpy(t.view().data(), h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
      };
      upload(dm.cu, m.cu);
      upload(dm.ctx, m.ctx);
      upload(dm.bt, m.bt);
      upload(dm.slots, m.slots);
      std::vector<float> ref(static_cast<size_t>(T * Hq * D));
      cpu::paged_attention(cuda_test::host_view(ref, {T, Hq, D}), cuda_test::host_view(q.f32, {T, Hq, D}),
                           cuda_test::host_view(kc.f32, {NB, BS, Hk, D}), cuda_test::host_view(vc.f32, {NB, BS, Hk, D}),
                           host_meta(m, BS), scale);
      for (int rep = 0; rep < 2; ++rep) {
        d_out.fill_bytes(0xff);
        CUDA_CHECK(cudaGraphLaunch(exec, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        expect_close(d_out.download_f32(), ref, kAtol, kRtol,
                     "decode graph replay D=" + std::to_string(D) + " round " + std::to_string(round) + " rep " +
                         std::to_string(rep));
      }
    }
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(st));
  }
}

TEST(CudaAttention, PrefillAndMixedBatches) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 200;
  for (int64_t D : {64, 128}) {
    for (int64_t G : {1, 2, 4, 8}) {
      // full prefills, prefix-cached prefills (ctx > qlen) and decodes in one batch
      Batch b{{17, 5, 1, 129, 1, 16, 33}, {17, 40, 257, 300, 16, 16, 15 + 33}};
      check_attention(b, 2 * G, 2, D, 16, seed++);
      Batch single{{257}, {257}};
      check_attention(single, G, 1, D, 16, seed++);
    }
  }
  check_attention(Batch{{15, 16, 17}, {255, 256, 257}}, 8, 2, 128, 256, seed++);  // around BS = 256
  check_attention(Batch{{1000, 3}, {1500, 3}}, 32, 8, 128, 16, seed++);          // long prefix-cached chunk
  check_attention(Batch{{40, 1}, {40, 77}}, 8, 2, 256, 16, seed++);               // D = 256
  check_attention(Batch{{9, 1}, {20, 5}}, 24, 2, 128, 16, seed++);                // G = 12: head chunks
}

// A chunked-prefill step as the scheduler lays it out: decodes first (contexts around the 16-key tile,
// the 64-key split granule and block boundaries, and long enough to split), then prefill chunks, full
// and prefix-cached, and one more decode among them. The leading decodes take the decode kernel (split
// counts from their own contexts on the device), the rest the prefill kernel.
TEST(CudaAttention, MixedStepLeadingDecodesTakeTheDecodeKernel) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 2100;
  const Batch b{{1, 1, 1, 1, 1, 1, 1, 1, 1, 37, 1, 200, 129},
                {1, 15, 16, 17, 63, 65, 256, 1000, 3000, 37, 400, 200, 129 + 300}};
  for (int64_t BS : {16, 256})
    for (int64_t D : {64, 128})
      for (int64_t G : {1, 2, 4, 8}) check_attention(b, 2 * G, 2, D, BS, seed++);
  check_attention(b, 32, 2, 128, 16, seed++);              // G = 16: the decode kernel's largest group
  check_attention(b, 16, 8, 128, 16, seed++, 0, 3);        // Qwen3-0.6B heads, repeat launches (counters)
  check_attention(Batch{{1, 1, 5}, {700, 9, 5}}, 16, 2, 256, 16, seed++);  // D 256: prefill kernel only
}

// head_dim 64 / 128 with max_query_len > 1 run the tensor-core kernel (attention_prefill_tc.cu). Its CTA
// holds 64 items = (query row, head of one GQA group) pairs, i.e. 64 / G query rows, and walks the keys in
// tiles of 64; the sizes below sit on, under and over both tile sizes for G = 1, 4, 8 (64, 16, 8 rows).
TEST(CudaAttention, TensorCorePrefillPartialTiles) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 400;
  for (int64_t D : {64, 128}) {
    for (auto [Hq, Hk] : {std::pair<int64_t, int64_t>{2, 2}, {8, 2}, {8, 1}}) {
      // full prefills of every length around the query and key tiles (shorter than one tile too)
      const std::vector<int32_t> lens{2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 100, 128, 129};
      Batch full{lens, lens};
      check_attention(full, Hq, Hk, D, 16, seed++);
      // prefix-cached chunks (the causal diagonal lands mid key tile) mixed with decodes
      Batch mixed{{3, 1, 64, 65, 1, 130, 2}, {3 + 61, 200, 64 + 64, 65 + 1, 1, 130 + 127, 2 + 190}};
      check_attention(mixed, Hq, Hk, D, 16, seed++);
    }
  }
}

TEST(CudaAttention, TensorCorePrefillBlockSizes) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 500;
  // 64-key tiles gather 4 blocks (BS 16), 2 (32), blocks straddling tiles (48), or part of one (256);
  // BS 8 (not a multiple of 16) works too: the gather is per key row.
  for (int64_t BS : {8, 16, 32, 48, 256}) {
    Batch b{{70, 1, 129, 33}, {static_cast<int32_t>(70 + BS + 3), 300, 129, 33 + 257}};
    check_attention(b, 8, 2, 128, BS, seed++);
    check_attention(b, 4, 4, 64, BS, seed++);
  }
}

TEST(CudaAttention, TensorCorePrefixCachedLongChunk) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 600;
  // a 700-token chunk after 2300 cached tokens (context 3000), beside a short chunk and a decode
  struct Case { int64_t hq, hk, d, bs; };
  for (const Case c : {Case{2, 2, 128, 16}, Case{4, 1, 64, 32}, Case{8, 1, 128, 256}, Case{16, 2, 64, 16}}) {
    check_attention(Batch{{700, 20, 1}, {3000, 20 + 500, 1001}}, c.hq, c.hk, c.d, c.bs, seed++);
  }
}

TEST(CudaAttention, TensorCorePrefillOddGroups) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 700;
  // G = 3 (21 rows per CTA, 63 of 64 items used), G = 5 (12 rows), G = 16 (4 rows)
  Batch b{{22, 1, 45, 5}, {22, 90, 45 + 64, 5}};
  check_attention(b, 6, 2, 128, 16, seed++);
  check_attention(b, 5, 1, 64, 32, seed++);
  check_attention(b, 32, 2, 128, 16, seed++);
}

// The launch depends on the metadata only through shapes (T, S, block-table width): captured once in a
// CUDA graph, replays follow new sequence lengths and block tables written into the same buffers.
void check_prefill_graph_replay(int64_t Hq, int64_t Hk, int64_t D, int64_t BS, uint32_t seed) {
  const Batch first{{40, 24}, {300, 54}}, second{{10, 54}, {290, 60}};  // same T = 64, S = 2
  std::mt19937 rng(seed);
  const int64_t NB = (300 + BS - 1) / BS + (60 + BS - 1) / BS + 3;
  BatchMeta m1 = make_meta(first, BS, NB, rng);
  BatchMeta m2 = make_meta(second, BS, NB, rng);
  ASSERT_EQ(m1.T, m2.T);
  ASSERT_EQ(m1.max_blocks, m2.max_blocks);
  auto q = random_bf16(static_cast<size_t>(m1.T * Hq * D), rng, -2.0f, 2.0f);
  auto kc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng, -2.0f, 2.0f);
  auto vc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng);
  DeviceTensor d_q(DType::kBF16, {m1.T, Hq, D}, q.bits), d_out(DType::kBF16, {m1.T, Hq, D});
  DeviceTensor d_k(DType::kBF16, {NB, BS, Hk, D}, kc.bits), d_v(DType::kBF16, {NB, BS, Hk, D}, vc.bits);
  DeviceMeta dm(m1, BS);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  // warm-up outside capture (one-time function attributes), then capture
  cuda_ops::paged_attention(d_out.view(), d_q.view(), d_k.view(), d_v.view(), dm.meta, scale, cuda_test::on(st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  cuda_ops::paged_attention(d_out.view(), d_q.view(), d_k.view(), d_v.view(), dm.meta, scale, cuda_test::on(st));
  CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int round = 0; round < 2; ++round) {
    BatchMeta& m = round == 0 ? m1 : m2;
    auto upload = [](const DeviceTensor& t, const std::vector<int32_t>& h) {
      CUDA_CHECK(cudaMemcpy(t.view().data(), h.data(), h.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    };
    upload(dm.cu, m.cu);
    upload(dm.ctx, m.ctx);
    upload(dm.bt, m.bt);
    upload(dm.slots, m.slots);
    d_out.fill_bytes(0xff);
    CUDA_CHECK(cudaGraphLaunch(exec, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    std::vector<float> ref(static_cast<size_t>(m.T * Hq * D));
    cpu::paged_attention(cuda_test::host_view(ref, {m.T, Hq, D}), cuda_test::host_view(q.f32, {m.T, Hq, D}),
                         cuda_test::host_view(kc.f32, {NB, BS, Hk, D}), cuda_test::host_view(vc.f32, {NB, BS, Hk, D}),
                         host_meta(m, BS), scale);
    expect_close(d_out.download_f32(), ref, kAtol, kRtol,
                 "graph replay D=" + std::to_string(D) + " Hq=" + std::to_string(Hq) + " BS=" + std::to_string(BS) +
                     " round " + std::to_string(round));
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(st));
}

TEST(CudaAttention, TensorCorePrefillGraphReplayFollowsMetadata) {
  SKIP_WITHOUT_CUDA();
  check_prefill_graph_replay(8, 2, 128, 16, 800);
}

// The sm_90a wgmma prefill kernel (attention_prefill_wgmma.cu; on other GPUs these run the mma.sync
// kernel): CTAs of 128 items = 2 warpgroups x 64 (query row, GQA head) pairs, key tiles of 128. Lengths
// sit on, under and over 64 / 128 items and 128 keys for G = 1, 4, 8 (128, 32, 16 rows per CTA); the
// mixed batches put decode tokens (warpgroup 1 idle) beside prefix-cached chunks whose causal diagonal
// lands mid key tile.
TEST(CudaAttention, WgmmaPrefillTiles) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 1500;
  for (int64_t D : {64, 128}) {
    for (auto [Hq, Hk] : {std::pair<int64_t, int64_t>{2, 2}, {8, 2}, {16, 2}}) {
      const std::vector<int32_t> lens{2, 15, 31, 33, 63, 64, 65, 127, 128, 129, 255, 257, 300};
      check_attention(Batch{lens, lens}, Hq, Hk, D, 16, seed++);
      Batch mixed{{1, 3, 128, 129, 1, 200, 64, 2},
                  {300, 3 + 125, 128 + 128, 129 + 1, 1, 200 + 333, 64 + 64, 2 + 255}};
      check_attention(mixed, Hq, Hk, D, 16, seed++);
    }
  }
}

TEST(CudaAttention, WgmmaPrefillBlockSizesAndGroups) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 1600;
  for (int64_t BS : {16, 32, 64, 256, 8, 48}) {
    Batch b{{130, 1, 257, 33}, {static_cast<int32_t>(130 + BS + 3), 500, 257, 33 + 513}};
    check_attention(b, 8, 2, 128, BS, seed++);
    check_attention(b, 4, 4, 64, BS, seed++);
  }
  // G = 3 (42 rows, 126 of 128 items), 5 (25 rows), 12, 16 (8 rows), 32 (4 rows), 64 (2 rows)
  Batch b{{70, 1, 45, 5, 130}, {70, 90, 45 + 64, 5, 130 + 200}};
  check_attention(b, 6, 2, 128, 16, seed++);
  check_attention(b, 5, 1, 64, 32, seed++);
  check_attention(b, 24, 2, 128, 16, seed++);
  check_attention(b, 32, 2, 64, 64, seed++);
  check_attention(b, 32, 1, 128, 16, seed++);
  check_attention(b, 64, 1, 128, 256, seed++);
}

// A long prefix-cached chunk (diagonal offset by 2300 cached keys, ~24 key tiles per CTA) beside a
// full prefill of odd length and decodes.
TEST(CudaAttention, WgmmaPrefillLongChunks) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 1700;
  struct Case { int64_t hq, hk, d, bs; };
  for (const Case c : {Case{4, 4, 128, 16}, Case{8, 2, 128, 16}, Case{16, 2, 64, 32}, Case{8, 1, 128, 256}}) {
    check_attention(Batch{{700, 1, 1111, 1}, {3000, 1001, 1111, 7}}, c.hq, c.hk, c.d, c.bs, seed++);
  }
}

TEST(CudaAttention, WgmmaPrefillGraphReplay) {
  SKIP_WITHOUT_CUDA();
  check_prefill_graph_replay(8, 2, 64, 32, 1800);
  check_prefill_graph_replay(16, 2, 128, 64, 1801);
  check_prefill_graph_replay(2, 2, 128, 256, 1802);
}

// The mma.sync kernel stays correct on every GPU (the wgmma kernel forced off on Hopper).
TEST(CudaAttention, MmaSyncPrefillWhenWgmmaDisabled) {
  SKIP_WITHOUT_CUDA();
  ScopedPrefillPath path(false);
  uint32_t seed = 1900;
  for (int64_t D : {64, 128}) {
    const std::vector<int32_t> lens{2, 17, 64, 65, 129, 300};
    check_attention(Batch{lens, lens}, 8, 2, D, 16, seed++);
    check_attention(Batch{{1, 3, 130, 1}, {300, 3 + 125, 130 + 127, 9}}, 8, 1, D, 32, seed++);
  }
  check_attention(Batch{{700, 20, 1}, {3000, 20 + 500, 1001}}, 32, 8, 128, 16, seed++);
  check_prefill_graph_replay(8, 2, 128, 16, seed++);
}

// Timing only (run with --gtest_also_run_disabled_tests --gtest_filter='CudaAttentionBench.*Prefill*'):
// causal prefills, each timed with the wgmma kernel (sm_90a; elsewhere the same kernel twice) and with the
// mma.sync kernel. FLOPs counted as causal: per sequence 4 * L^2 / 2 * Hq * D (Q K^T and P V, half the
// score matrix).
void bench_prefill(const char* name, const Batch& b, int64_t Hq, int64_t Hk, int64_t D, int64_t BS) {
  std::mt19937 rng(900 + static_cast<uint32_t>(BS + D));
  double flops = 0;
  for (size_t s = 0; s < b.qlen.size(); ++s)
    flops += 4.0 * static_cast<double>(b.qlen[s]) * static_cast<double>(b.qlen[s]) / 2.0 * static_cast<double>(Hq * D);
  AttentionCase c(b, Hq, Hk, D, BS, rng);
  const int64_t T = c.m.T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> first;
  for (bool wgmma : {true, false}) {
    ScopedPrefillPath path(wgmma);
    c.d_out.fill_bytes(0xff);
    auto run = [&] { c.run(scale); };
    for (int i = 0; i < 3; ++i) run();
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> ms = time_each_ms(nullptr, 30, run);
    const double med = ms[ms.size() / 2];
    std::printf("%-10s %-8s T=%lld Hq=%lld Hk=%lld D=%lld BS=%lld: median %.3f ms (min %.3f, max %.3f), %.1f TFLOP/s\n",
                name, wgmma ? "wgmma" : "mma.sync", static_cast<long long>(T), static_cast<long long>(Hq),
                static_cast<long long>(Hk), static_cast<long long>(D), static_cast<long long>(BS), med, ms.front(),
                ms.back(), flops / (med * 1e-3) / 1e12);
    // every element written and finite (outputs were NaN-poisoned); both kernels agree to bf16 rounding
    const std::vector<float> got = c.d_out.download_f32();
    size_t bad = 0;
    for (float v : got) bad += std::isfinite(v) ? 0 : 1;
    EXPECT_EQ(bad, 0u) << name;
    if (first.empty()) first = got;
    else expect_close(got, first, kAtol, kRtol, std::string(name) + " wgmma vs mma.sync");
  }
}

TEST(CudaAttentionBench, DISABLED_Prefill8k) {
  SKIP_WITHOUT_CUDA();
  const Batch one{{8192}, {8192}};
  for (int64_t BS : {16, 256}) bench_prefill("8k", one, 32, 8, 128, BS);
  bench_prefill("8k", one, 32, 8, 64, 16);
  const Batch eight{std::vector<int32_t>(8, 1024), std::vector<int32_t>(8, 1024)};
  bench_prefill("8x1k", eight, 32, 8, 128, 16);
  bench_prefill("8x1k", eight, 32, 8, 64, 16);
  // A prefill step of the throughput bench (Qwen3-0.6B heads): prompts U[100, 1024] up to 8,192 rows.
  std::mt19937 rng(2300);
  Batch prompts;
  for (int64_t rows = 0; rows < 8192;) {
    const int32_t len = static_cast<int32_t>(std::min<int64_t>(100 + rng() % 925, 8192 - rows));
    prompts.qlen.push_back(len);
    prompts.ctx.push_back(len);
    rows += len;
  }
  bench_prefill("U[100,1k]", prompts, 16, 8, 128, 16);
}

// Timing only (run with --gtest_also_run_disabled_tests --gtest_filter='CudaAttentionBench.*Mixed*'):
// chunked-prefill steps of the throughput bench's shape (Qwen3-0.6B heads: Hq 16, Hk 8, D 128, BS 16):
// `decodes` leading decode rows with contexts U[100, 1024], then prefills of U[100, 1024] tokens up to
// 8,192 rows in all. Timed with the leading decodes through the decode kernel and (num_leading_decodes
// = 0) through the prefill kernel; both outputs must agree.
TEST(CudaAttentionBench, DISABLED_MixedStep) {
  SKIP_WITHOUT_CUDA();
  const int64_t Hq = 16, Hk = 8, D = 128, BS = 16;
  for (int decodes : {16, 64, 128, 240}) {
    std::mt19937 rng(2200 + static_cast<uint32_t>(decodes));
    Batch b;
    for (int i = 0; i < decodes; ++i) {
      b.qlen.push_back(1);
      b.ctx.push_back(100 + static_cast<int32_t>(rng() % 925));
    }
    int64_t rows = decodes;
    while (rows < 8192) {
      const int32_t len = static_cast<int32_t>(std::min<int64_t>(100 + rng() % 925, 8192 - rows));
      b.qlen.push_back(len);
      b.ctx.push_back(len);
      rows += len;
    }
    AttentionCase c(b, Hq, Hk, D, BS, rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    std::vector<float> first;
    for (const int64_t lead : {c.m.leading_decodes, int64_t{0}}) {
      c.dm.meta.num_leading_decodes = lead;
      c.d_out.fill_bytes(0xff);
      auto run = [&] { c.run(scale); };
      for (int i = 0; i < 3; ++i) run();
      CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> ms = time_each_ms(nullptr, 30, run);
      std::printf("mixed step: %3d decodes + %zu prefills (%lld rows), num_leading_decodes %3lld: median %.1f us (min %.1f)\n",
                  decodes, b.qlen.size() - static_cast<size_t>(decodes), static_cast<long long>(c.m.T),
                  static_cast<long long>(lead), ms[ms.size() / 2] * 1e3, ms.front() * 1e3);
      const std::vector<float> got = c.d_out.download_f32();
      if (first.empty()) first = got;
      else expect_close(got, first, kAtol, kRtol, "mixed step, split vs prefill kernel only");
    }
  }
}

// Timing only (run with --gtest_also_run_disabled_tests --gtest_filter='CudaAttentionBench.*Decode*'):
// decode attention, Hk 8, D 128, BS 16, GQA 2 (Hq 16) and 4 (Hq 32). Per case R calls are captured in
// one CUDA graph, each with its own block table over a disjoint part of one cache (R x KV >= 256 MB, so
// small cases are not served from L2); the median graph replay / R is the per-call (per-layer) time.
// GB/s = the K and V bytes the call must read (sum of context lengths x Hk x D x 2 x 2 B) / time.
TEST(CudaAttentionBench, DISABLED_Decode) {
  SKIP_WITHOUT_CUDA();
  const int64_t Hk = 8, D = 128;
  struct Case {
    const char* name;
    int bs;
    int ctx_lo, ctx_hi;  // context lengths U[lo, hi]
    int64_t meta_max_ctx;  // 0: the real maximum
    int64_t block_size;
    bool longest_first;    // sequences in decreasing context order
  };
  const Case cases[] = {{"bs1 ctx1024", 1, 1024, 1024, 0, 16, false},
                        {"bs1 ctx1024 max40960", 1, 1024, 1024, 40960, 16, false},
                        {"bs64 ctx1000", 64, 1000, 1000, 0, 16, false},
                        {"bs64 ctx1000 max40960", 64, 1000, 1000, 40960, 16, false},
                        {"bs256 U[100,2000]", 256, 100, 2000, 0, 16, false},
                        {"bs256 U[100,2000] max40960", 256, 100, 2000, 40960, 16, false},
                        {"bs256 U[100,2000] B256", 256, 100, 2000, 0, 256, false},
                        {"bs256 U[100,2000] B256 desc", 256, 100, 2000, 0, 256, true}};
  std::printf("%-28s %4s %10s %10s %10s\n", "case", "G", "us/call", "GB/s", "KV MB");
  {
    for (int64_t G : {2, 4}) {
      const int64_t Hq = G * Hk;
      for (const Case& c : cases) {
        const int64_t BS = c.block_size;
        std::mt19937 rng(1300 + static_cast<uint32_t>(c.bs));
        Batch b;
        int64_t keys = 0, blocks = 0;
        for (int s = 0; s < c.bs; ++s) {
          const int32_t ctx = c.ctx_lo + static_cast<int32_t>(rng() % static_cast<uint32_t>(c.ctx_hi - c.ctx_lo + 1));
          b.qlen.push_back(1);
          b.ctx.push_back(ctx);
        }
        if (c.longest_first) std::sort(b.ctx.begin(), b.ctx.end(), std::greater<int32_t>());
        for (int32_t ctx : b.ctx) {
          keys += ctx;
          blocks += (ctx + BS - 1) / BS;
        }
        const double kv_bytes = static_cast<double>(keys) * static_cast<double>(Hk * D) * 2.0 * 2.0;
        const int R = std::max(4, std::min(64, static_cast<int>(std::ceil(256e6 / kv_bytes))));
        const int64_t NB = blocks * R + 3;
        std::vector<BatchMeta> metas;
        std::vector<std::unique_ptr<DeviceMeta>> dms;
        for (int r = 0; r < R; ++r) {
          metas.push_back(make_meta(b, BS, NB, rng));  // a fresh permutation: call r reads its own blocks
        }
        // Disjoint blocks across calls: remap call r's blocks into [r * blocks, (r + 1) * blocks).
        for (int r = 0; r < R; ++r) {
          std::vector<int32_t> ids;
          for (int32_t v : metas[static_cast<size_t>(r)].bt) if (v >= 0) ids.push_back(v);
          std::sort(ids.begin(), ids.end());
          for (int32_t& v : metas[static_cast<size_t>(r)].bt) {
            if (v >= 0) v = static_cast<int32_t>(r * blocks + (std::lower_bound(ids.begin(), ids.end(), v) - ids.begin()));
          }
          dms.push_back(std::make_unique<DeviceMeta>(metas[static_cast<size_t>(r)], BS));
          if (c.meta_max_ctx > 0) dms.back()->meta.max_context_len = c.meta_max_ctx;
        }
        // Random cache contents: an 8 MB random pattern tiled over the caches.
        DeviceTensor d_k(DType::kBF16, {NB, BS, Hk, D}), d_v(DType::kBF16, {NB, BS, Hk, D});
        {
          auto pat = random_bf16(size_t{4} << 20, rng, -2.0f, 2.0f);
          const size_t total = static_cast<size_t>(NB * BS * Hk * D) * 2, chunk = pat.bits.size() * 2;
          for (const DeviceTensor* t : {&d_k, &d_v}) {
            char* dst = static_cast<char*>(t->view().data());
            for (size_t off = 0; off < total; off += chunk)
              CUDA_CHECK(cudaMemcpy(dst + off, pat.bits.data(), std::min(chunk, total - off), cudaMemcpyHostToDevice));
          }
        }
        auto q = random_bf16(static_cast<size_t>(c.bs * Hq * D), rng, -2.0f, 2.0f);
        DeviceTensor d_q(DType::kBF16, {c.bs, Hq, D}, q.bits), d_out(DType::kBF16, {c.bs, Hq, D});
        d_out.fill_bytes(0xff);
        const float scale = 1.0f / std::sqrt(static_cast<float>(D));
        cudaStream_t st;
        CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        for (int r = 0; r < R; ++r)
          cuda_ops::paged_attention(d_out.view(), d_q.view(), d_k.view(), d_v.view(), dms[static_cast<size_t>(r)]->meta,
                                    scale, cuda_test::on(st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (int r = 0; r < R; ++r)
          cuda_ops::paged_attention(d_out.view(), d_q.view(), d_k.view(), d_v.view(), dms[static_cast<size_t>(r)]->meta,
                                    scale, cuda_test::on(st));
        CUDA_CHECK(cudaStreamEndCapture(st, &graph));
        CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        for (int i = 0; i < 3; ++i) CUDA_CHECK(cudaGraphLaunch(exec, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        std::vector<float> ms = graph_replay_ms(exec, st, 20);
        for (float& t : ms) t /= static_cast<float>(R);
        const double us = ms[ms.size() / 2] * 1e3;
        std::printf("%-28s %4lld %10.2f %10.1f %10.1f   (min %.2f max %.2f us, %d calls/graph)\n", c.name,
                    static_cast<long long>(G), us, kv_bytes / (us * 1e-6) / 1e9, kv_bytes / 1e6, ms.front() * 1e3,
                    ms.back() * 1e3, R);
        const std::vector<float> got = d_out.download_f32();  // every element written and finite
        size_t bad = 0;
        for (float v : got) bad += std::isfinite(v) ? 0 : 1;
        EXPECT_EQ(bad, 0u) << c.name;
        CUDA_CHECK(cudaGraphExecDestroy(exec));
        CUDA_CHECK(cudaGraphDestroy(graph));
        CUDA_CHECK(cudaStreamDestroy(st));
      }
    }
  }
}

TEST(CudaPrologue, MatchesReference) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 300;
  for (int64_t D : {64, 128}) {
    for (auto [Hq, Hk] : {std::pair<int64_t, int64_t>{8, 8}, {16, 2}, {32, 4}, {8, 1}}) {
      // rotate_half on the whole head with and without norms; GLM-4's interleaved RoPE on half the head.
      for (auto [norms, pairs] : {std::pair<bool, int64_t>{true, 0}, {false, 0}, {false, D / 4}}) {
        const bool interleaved = pairs > 0;
        if (!interleaved) pairs = D / 2;
        std::mt19937 rng(seed++);
        const int64_t BS = 16;
        Batch b{{17, 1, 129}, {40, 300, 129}};
        const int64_t NB = 3 + (40 + 15) / 16 + (300 + 15) / 16 + (129 + 15) / 16;
        BatchMeta m = make_meta(b, BS, NB, rng);
        m.slots[3] = -1;  // a padding token: q still written, nothing cached
        for (auto& p : m.positions) p += static_cast<int32_t>(rng() % 40000);  // large angles too
        const int64_t T = m.T, W = (Hq + 2 * Hk) * D;
        auto qkv = random_bf16(static_cast<size_t>(T * W), rng, -3.0f, 3.0f);
        auto qn = random_bf16(static_cast<size_t>(D), rng, 0.5f, 1.5f);
        auto kn = random_bf16(static_cast<size_t>(D), rng, 0.5f, 1.5f);
        auto kc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng);
        auto vc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng);
        std::vector<float> inv_freq(static_cast<size_t>(pairs));
        for (int64_t i = 0; i < pairs; ++i)
          inv_freq[static_cast<size_t>(i)] = static_cast<float>(std::pow(1e6, -static_cast<double>(i) / pairs));
        const float attn_scaling = 1.1f;
        DeviceTensor d_qkv(DType::kBF16, {T, W}, qkv.bits), d_qn(DType::kBF16, {D}, qn.bits),
            d_kn(DType::kBF16, {D}, kn.bits), d_k(DType::kBF16, {NB, BS, Hk, D}, kc.bits),
            d_v(DType::kBF16, {NB, BS, Hk, D}, vc.bits), d_pos(DType::kI32, {T}, m.positions),
            d_if(DType::kF32, {pairs}, inv_freq), d_q(DType::kBF16, {T, Hq, D});
        d_q.fill_bytes(0xff);
        DeviceMeta dm(m, BS);
        ops::RopeParams rope{d_if.view(), attn_scaling, interleaved};
        cuda_ops::qkv_prologue(d_q.view(), d_qkv.view(), norms ? d_qn.view() : TensorView(),
                               norms ? d_kn.view() : TensorView(), 1e-6f, d_pos.view(), rope, d_k.view(), d_v.view(),
                               dm.meta, cuda_test::on());
        std::vector<float> ref_q(static_cast<size_t>(T * Hq * D)), ref_k = kc.f32, ref_v = vc.f32;
        cpu::qkv_prologue(cuda_test::host_view(ref_q, {T, Hq, D}), cuda_test::host_view(qkv.f32, {T, W}),
                          norms ? cuda_test::host_view(qn.f32, {D}) : TensorView(),
                          norms ? cuda_test::host_view(kn.f32, {D}) : TensorView(), 1e-6f,
                          cuda_test::host_view(m.positions, {T}), inv_freq.data(), attn_scaling,
                          cuda_test::host_view(ref_k, {NB, BS, Hk, D}), cuda_test::host_view(ref_v, {NB, BS, Hk, D}),
                          host_meta(m, BS), pairs, interleaved);
        const std::string what = "prologue D=" + std::to_string(D) + " Hq=" + std::to_string(Hq) +
                                 " Hk=" + std::to_string(Hk) + (norms ? " norms" : "") +
                                 (interleaved ? " interleaved pairs=" + std::to_string(pairs) : "");
        expect_close(d_q.download_f32(), ref_q, kAtol, kRtol, what + " q");
        // Untouched cache rows keep their bf16 values exactly; written rows are one rounding of fp32 math.
        expect_close(d_k.download_f32(), ref_k, kAtol, kRtol, what + " k cache");
        expect_close(d_v.download_f32(), ref_v, 0, 0, what + " v cache");
      }
    }
  }
}

// Decode steps through ops::qkv_prologue_attention with the prologue fused into the attention kernel
// (sm_90) against the same op run as two kernels (qkv_prologue, then the attention): attention output and
// both caches bit for bit (the fused kernel rounds q and the new K exactly as qkv_prologue does and reads
// the same cached values), with the cluster combine and with the global one; and against the CPU
// reference (tolerance as the decode tests). Covers GQA 1-16, head_dim 64 / 128, with and without q/k
// norms, GLM-4's interleaved RoPE on half the head (and on a quarter, odd GQA 4), contexts around the 16-key tiles and the splits, a graph-sized max_context_len, block size 256,
// and a padding token (slot -1: nothing cached, the stale row attended as in the unfused path).
struct FusedPrologueGuard : cuda_test::RestoreOptions {
  explicit FusedPrologueGuard(bool on) { cuda_test::context().options.decode_fused_prologue = on; }
};

TEST(CudaAttention, DecodeFusedPrologueMatchesTwoKernels) {
  SKIP_WITHOUT_CUDA();
  if (cuda_test::device_major() < 9) GTEST_SKIP() << "the fused prologue runs on sm_90";
  struct Case {
    int64_t D, Hq, Hk, BS;
    std::vector<int32_t> ctx;
    int64_t graph_max_ctx;
    int64_t rope_pairs = 0;  // > 0: GLM-4's interleaved RoPE on the first 2 * rope_pairs elements (no norms)
  };
  const std::vector<int32_t> ctxs{1, 15, 16, 17, 64, 65, 300, 1024, 5000};
  const std::vector<Case> cases{{128, 16, 8, 16, ctxs, 0},        {128, 32, 8, 16, ctxs, 40960},
                                {128, 8, 1, 16, {1000, 17}, 0},   {128, 32, 2, 256, {2049, 255, 256, 257}, 0},
                                {64, 8, 8, 16, ctxs, 0},          {64, 16, 2, 32, {1, 700, 129}, 8192},
                                {128, 32, 4, 16, ctxs, 0, 32},    {128, 32, 2, 256, {2049, 257, 3}, 40960, 32},
                                {64, 12, 3, 16, {1, 33, 700}, 0, 16}};
  uint32_t seed = 1400;
  for (const Case& c : cases) {
    for (const bool norms : {true, false}) {
      if (norms && c.rope_pairs > 0) continue;  // GLM-4 has no q/k norms
      const bool interleaved = c.rope_pairs > 0;
      const int64_t pairs = interleaved ? c.rope_pairs : c.D / 2;
      std::mt19937 rng(seed++);
      const int64_t D = c.D, Hq = c.Hq, Hk = c.Hk, BS = c.BS;
      Batch b{std::vector<int32_t>(c.ctx.size(), 1), c.ctx};
      int64_t NB = 3;
      for (int32_t x : c.ctx) NB += (x + BS - 1) / BS;
      BatchMeta m = make_meta(b, BS, NB, rng);
      if (m.T > 1) m.slots[1] = -1;  // a padding token
      const int64_t T = m.T, W = (Hq + 2 * Hk) * D;
      auto qkv = random_bf16(static_cast<size_t>(T * W), rng, -3.0f, 3.0f);
      auto qn = random_bf16(static_cast<size_t>(D), rng, 0.5f, 1.5f);
      auto kn = random_bf16(static_cast<size_t>(D), rng, 0.5f, 1.5f);
      auto kc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng, -2.0f, 2.0f);
      auto vc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng);
      std::vector<float> inv_freq(static_cast<size_t>(pairs));
      for (int64_t i = 0; i < pairs; ++i)
        inv_freq[static_cast<size_t>(i)] = static_cast<float>(std::pow(1e6, -static_cast<double>(i) / pairs));
      DeviceTensor d_qkv(DType::kBF16, {T, W}, qkv.bits), d_qn(DType::kBF16, {D}, qn.bits),
          d_kn(DType::kBF16, {D}, kn.bits), d_pos(DType::kI32, {T}, m.positions), d_if(DType::kF32, {pairs}, inv_freq);
      DeviceMeta dm(m, BS);
      if (c.graph_max_ctx > 0) dm.meta.max_context_len = c.graph_max_ctx;
      const ops::RopeParams rope{d_if.view(), 1.0f, interleaved};
      const float scale = 1.0f / std::sqrt(static_cast<float>(D));
      const std::string what = "fused prologue D=" + std::to_string(D) + " Hq=" + std::to_string(Hq) +
                               " Hk=" + std::to_string(Hk) + " BS=" + std::to_string(BS) + (norms ? " norms" : "") +
                               (interleaved ? " interleaved pairs=" + std::to_string(pairs) : "");
      // [fused x cluster]: out, k cache, v cache
      std::vector<uint16_t> got[2][2][3];
      for (const bool fused : {true, false}) {
        for (const bool cluster : {true, false}) {
          FusedPrologueGuard fg(fused);
          ClusterCombineGuard cg(cluster);
          DeviceTensor d_k(DType::kBF16, {NB, BS, Hk, D}, kc.bits), d_v(DType::kBF16, {NB, BS, Hk, D}, vc.bits);
          DeviceTensor d_q(DType::kBF16, {T, Hq, D}), d_out(DType::kBF16, {T, Hq, D});
          d_out.fill_bytes(0xff);
          ops::qkv_prologue_attention(d_out.view(), d_q.view(), d_qkv.view(), norms ? d_qn.view() : TensorView(),
                                      norms ? d_kn.view() : TensorView(), 1e-6f, d_pos.view(), rope, d_k.view(),
                                      d_v.view(), dm.meta, scale, cuda_test::on());
          got[fused][cluster][0] = d_out.download<uint16_t>();
          got[fused][cluster][1] = d_k.download<uint16_t>();
          got[fused][cluster][2] = d_v.download<uint16_t>();
        }
      }
      for (const bool cluster : {true, false})
        for (int i = 0; i < 3; ++i)
          EXPECT_EQ(got[1][cluster][i], got[0][cluster][i])
              << what << (cluster ? " cluster" : " global") << " combine, " << (i == 0 ? "out" : i == 1 ? "k cache" : "v cache");
      // CPU reference of the two ops.
      std::vector<float> hq(static_cast<size_t>(T * Hq * D)), hout(hq.size()), hk = kc.f32, hv = vc.f32;
      cpu::qkv_prologue(cuda_test::host_view(hq, {T, Hq, D}), cuda_test::host_view(qkv.f32, {T, W}),
                        norms ? cuda_test::host_view(qn.f32, {D}) : TensorView(),
                        norms ? cuda_test::host_view(kn.f32, {D}) : TensorView(), 1e-6f,
                        cuda_test::host_view(m.positions, {T}), inv_freq.data(), 1.0f,
                        cuda_test::host_view(hk, {NB, BS, Hk, D}), cuda_test::host_view(hv, {NB, BS, Hk, D}),
                        host_meta(m, BS), pairs, interleaved);
      for (float& x : hq) x = bf16_to_f32(f32_to_bf16(x));  // q is bf16 on the GPU
      for (float& x : hk) x = bf16_to_f32(f32_to_bf16(x));
      cpu::paged_attention(cuda_test::host_view(hout, {T, Hq, D}), cuda_test::host_view(hq, {T, Hq, D}),
                           cuda_test::host_view(hk, {NB, BS, Hk, D}), cuda_test::host_view(hv, {NB, BS, Hk, D}),
                           host_meta(m, BS), scale);
      std::vector<float> out_f32(got[1][1][0].size());
      for (size_t i = 0; i < out_f32.size(); ++i) out_f32[i] = bf16_to_f32(got[1][1][0][i]);
      expect_close(out_f32, hout, kAtol, kRtol, what + " vs CPU");
    }
  }
}

}  // namespace
}  // namespace nanovllm
