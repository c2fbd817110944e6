// CUDA qkv_prologue and paged_attention against the CPU reference kernels.
// Inputs are random bf16 (the reference gets their exact fp32 values); block tables are shuffled
// permutations of the cache blocks; context lengths sit on and around block boundaries; batches mix
// full prefills, prefix-cached prefills (context > query length) and decodes.
// Tolerances: outputs are bf16 of fp32 math (one rounding, <= 2^-8 relative), attention outputs are
// convex combinations of V rows in [-1, 1]: atol 1e-2 + rtol 5e-3 per element.
#include <algorithm>
#include <numeric>

#include "cuda_test_util.h"

#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::expect_close;
using cuda_test::random_bf16;

constexpr float kAtol = 1e-2f, kRtol = 5e-3f;

std::vector<float> to_f32(const std::vector<uint16_t>& bits) {
  std::vector<float> f(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) f[i] = bf16_to_f32(bits[i]);
  return f;
}

// A batch: per sequence (query length, context length).
struct Batch {
  std::vector<int32_t> qlen, ctx;
};

struct BatchMeta {
  int64_t T = 0, S = 0, max_blocks = 0, max_q = 0, max_ctx = 0;
  std::vector<int32_t> cu, ctx, bt, slots, positions;
};

// Shuffled block tables over NB blocks; slot mapping and positions for this step's tokens.
BatchMeta make_meta(const Batch& b, int64_t BS, int64_t NB, std::mt19937& rng) {
  BatchMeta m;
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

struct DeviceMeta {
  DeviceTensor cu, ctx, bt, slots;
  AttentionMetadata meta;
  DeviceMeta(BatchMeta& m, int64_t BS)
      : cu(DType::kI32, {m.S + 1}, m.cu), ctx(DType::kI32, {m.S}, m.ctx), bt(DType::kI32, {m.S, m.max_blocks}, m.bt),
        slots(DType::kI32, {m.T}, m.slots) {
    meta = AttentionMetadata{m.S, m.T, m.max_q, m.max_ctx, cu.view(), ctx.view(), bt.view(), slots.view(), BS};
  }
};
AttentionMetadata host_meta(BatchMeta& m, int64_t BS) {
  return AttentionMetadata{m.S, m.T, m.max_q, m.max_ctx, cuda_test::host_view(m.cu, {m.S + 1}),
                           cuda_test::host_view(m.ctx, {m.S}), cuda_test::host_view(m.bt, {m.S, m.max_blocks}),
                           cuda_test::host_view(m.slots, {m.T}), BS};
}

void check_attention(const Batch& b, int64_t Hq, int64_t Hk, int64_t D, int64_t BS, uint32_t seed) {
  std::mt19937 rng(seed);
  int64_t total_blocks = 0;
  for (int32_t c : b.ctx) total_blocks += (c + BS - 1) / BS;
  const int64_t NB = total_blocks + 3;  // spare blocks the tables never name
  BatchMeta m = make_meta(b, BS, NB, rng);
  auto q = random_bf16(static_cast<size_t>(m.T * Hq * D), rng, -2.0f, 2.0f);
  auto kc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng, -2.0f, 2.0f);
  auto vc = random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng);
  DeviceTensor d_q(DType::kBF16, {m.T, Hq, D}, q.bits), d_out(DType::kBF16, {m.T, Hq, D});
  DeviceTensor d_k(DType::kBF16, {NB, BS, Hk, D}, kc.bits), d_v(DType::kBF16, {NB, BS, Hk, D}, vc.bits);
  DeviceMeta dm(m, BS);
  d_out.fill_bytes(0xff);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  cuda_ops::paged_attention(d_out.view(), d_q.view(), d_k.view(), d_v.view(), dm.meta, scale, {});
  std::vector<float> ref(static_cast<size_t>(m.T * Hq * D));
  cpu::paged_attention(cuda_test::host_view(ref, {m.T, Hq, D}), cuda_test::host_view(q.f32, {m.T, Hq, D}),
                       cuda_test::host_view(kc.f32, {NB, BS, Hk, D}), cuda_test::host_view(vc.f32, {NB, BS, Hk, D}),
                       host_meta(m, BS), scale);
  std::string what = "attention Hq=" + std::to_string(Hq) + " Hk=" + std::to_string(Hk) + " D=" + std::to_string(D) +
                     " BS=" + std::to_string(BS) + " seqs:";
  for (size_t s = 0; s < b.qlen.size(); ++s) what += " (" + std::to_string(b.qlen[s]) + "," + std::to_string(b.ctx[s]) + ")";
  expect_close(d_out.download_f32(), ref, kAtol, kRtol, what);
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

TEST(CudaPrologue, MatchesReference) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 300;
  for (int64_t D : {64, 128}) {
    for (auto [Hq, Hk] : {std::pair<int64_t, int64_t>{8, 8}, {16, 2}, {32, 4}, {8, 1}}) {
      for (bool norms : {true, false}) {
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
        std::vector<float> inv_freq(static_cast<size_t>(D / 2));
        for (int64_t i = 0; i < D / 2; ++i)
          inv_freq[static_cast<size_t>(i)] = static_cast<float>(std::pow(1e6, -2.0 * static_cast<double>(i) / D));
        const float attn_scaling = 1.1f;
        DeviceTensor d_qkv(DType::kBF16, {T, W}, qkv.bits), d_qn(DType::kBF16, {D}, qn.bits),
            d_kn(DType::kBF16, {D}, kn.bits), d_k(DType::kBF16, {NB, BS, Hk, D}, kc.bits),
            d_v(DType::kBF16, {NB, BS, Hk, D}, vc.bits), d_pos(DType::kI32, {T}, m.positions),
            d_if(DType::kF32, {D / 2}, inv_freq), d_q(DType::kBF16, {T, Hq, D});
        d_q.fill_bytes(0xff);
        DeviceMeta dm(m, BS);
        ops::RopeParams rope{d_if.view(), attn_scaling};
        cuda_ops::qkv_prologue(d_q.view(), d_qkv.view(), norms ? d_qn.view() : TensorView(),
                               norms ? d_kn.view() : TensorView(), 1e-6f, d_pos.view(), rope, d_k.view(), d_v.view(),
                               dm.meta, {});
        std::vector<float> ref_q(static_cast<size_t>(T * Hq * D)), ref_k = kc.f32, ref_v = vc.f32;
        cpu::qkv_prologue(cuda_test::host_view(ref_q, {T, Hq, D}), cuda_test::host_view(qkv.f32, {T, W}),
                          norms ? cuda_test::host_view(qn.f32, {D}) : TensorView(),
                          norms ? cuda_test::host_view(kn.f32, {D}) : TensorView(), 1e-6f,
                          cuda_test::host_view(m.positions, {T}), inv_freq.data(), attn_scaling,
                          cuda_test::host_view(ref_k, {NB, BS, Hk, D}), cuda_test::host_view(ref_v, {NB, BS, Hk, D}),
                          host_meta(m, BS));
        const std::string what = "prologue D=" + std::to_string(D) + " Hq=" + std::to_string(Hq) +
                                 " Hk=" + std::to_string(Hk) + (norms ? " norms" : "");
        expect_close(d_q.download_f32(), ref_q, kAtol, kRtol, what + " q");
        // Untouched cache rows keep their bf16 values exactly; written rows are one rounding of fp32 math.
        expect_close(d_k.download_f32(), ref_k, kAtol, kRtol, what + " k cache");
        expect_close(d_v.download_f32(), ref_v, 0, 0, what + " v cache");
      }
    }
  }
}

}  // namespace
}  // namespace nanovllm
