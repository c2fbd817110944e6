// paged_attention against dense causal attention over contiguous per-sequence K/V (double precision).
// The test owns the truth (contiguous K/V per sequence) and scatters it into a paged cache through a
// shuffled block table; unused cache slots hold large garbage so a wrong read cannot go unnoticed.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm {
namespace {

using test::HostTensor;

struct SeqSpec {
  int64_t ctx;   // KV length after this step
  int64_t qlen;  // query tokens this step (the last qlen positions)
};

float round_to(DType t, float x) {
  if (t == DType::kBF16) return bf16_to_f32(f32_to_bf16(x));
  if (t == DType::kF16) return f16_to_f32(f32_to_f16(x));
  return x;
}

struct PagedBatch {
  int64_t Hq, Hk, D, BS, NB = 0, T = 0;
  std::vector<SeqSpec> seqs;
  std::vector<std::vector<double>> K, V;  // per seq [ctx, Hk, D], values as stored
  HostTensor q, k_cache, v_cache, cu, ctx, bt, slots;
  AttentionMetadata meta;

  PagedBatch(std::vector<SeqSpec> specs, int64_t hq, int64_t hk, int64_t d, int64_t bs, DType kv_dtype,
             DType q_dtype, std::mt19937& rng)
      : Hq(hq), Hk(hk), D(d), BS(bs), seqs(std::move(specs)) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    int64_t needed = 0, max_blocks = 1;
    for (const auto& s : seqs) {
      needed += (s.ctx + BS - 1) / BS;
      max_blocks = std::max(max_blocks, (s.ctx + BS - 1) / BS + 1);  // + a -1 padded column
      T += s.qlen;
    }
    NB = needed + 3;  // spare blocks nobody owns
    k_cache = HostTensor(kv_dtype, {NB, BS, Hk, D});
    v_cache = HostTensor(kv_dtype, {NB, BS, Hk, D});
    for (int64_t i = 0; i < k_cache.numel(); ++i) {
      k_cache.set(i, 1000.0f);
      v_cache.set(i, -1000.0f);
    }
    std::vector<int32_t> ids(static_cast<size_t>(NB));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    const int64_t S = static_cast<int64_t>(seqs.size());
    std::vector<int32_t> cu_v{0}, ctx_v, bt_v(static_cast<size_t>(S * max_blocks), -1), slot_v;
    size_t next_id = 0;
    for (int64_t s = 0; s < S; ++s) {
      const SeqSpec& sp = seqs[static_cast<size_t>(s)];
      const int64_t blocks = (sp.ctx + BS - 1) / BS;
      for (int64_t b = 0; b < blocks; ++b) bt_v[static_cast<size_t>(s * max_blocks + b)] = ids[next_id++];
      std::vector<double> kk(static_cast<size_t>(sp.ctx * Hk * D)), vv(kk.size());
      for (int64_t p = 0; p < sp.ctx; ++p) {
        const int64_t slot = int64_t{bt_v[static_cast<size_t>(s * max_blocks + p / BS)]} * BS + p % BS;
        for (int64_t i = 0; i < Hk * D; ++i) {
          const float kx = round_to(kv_dtype, u(rng)), vx = round_to(kv_dtype, u(rng));
          kk[static_cast<size_t>(p * Hk * D + i)] = kx;
          vv[static_cast<size_t>(p * Hk * D + i)] = vx;
          k_cache.set(slot * Hk * D + i, kx);
          v_cache.set(slot * Hk * D + i, vx);
        }
        if (p >= sp.ctx - sp.qlen) slot_v.push_back(static_cast<int32_t>(slot));
      }
      K.push_back(std::move(kk));
      V.push_back(std::move(vv));
      cu_v.push_back(cu_v.back() + static_cast<int32_t>(sp.qlen));
      ctx_v.push_back(static_cast<int32_t>(sp.ctx));
    }
    q = test::random_tensor(q_dtype, {T, Hq, D}, rng);
    cu = test::i32_tensor(cu_v);
    ctx = test::i32_tensor(ctx_v);
    bt = test::i32_tensor(bt_v, {S, max_blocks});
    slots = test::i32_tensor(slot_v);
    meta.num_seqs = S;
    meta.num_tokens = T;
    meta.cu_seqlens_q = cu.v;
    meta.context_lens = ctx.v;
    meta.block_tables = bt.v;
    meta.slot_mapping = slots.v;
    meta.block_size = BS;
    for (const auto& s : seqs) {
      meta.max_query_len = std::max(meta.max_query_len, s.qlen);
      meta.max_context_len = std::max(meta.max_context_len, s.ctx);
    }
  }

  // Dense causal attention per sequence in double.
  std::vector<double> reference(double scale) const {
    std::vector<double> out(static_cast<size_t>(T * Hq * D));
    const std::vector<double> qd = q.to_double();
    const int64_t group = Hq / Hk;
    int64_t row = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const SeqSpec& sp = seqs[s];
      for (int64_t i = 0; i < sp.qlen; ++i, ++row) {
        const int64_t p = sp.ctx - sp.qlen + i;
        for (int64_t h = 0; h < Hq; ++h) {
          const int64_t kvh = h / group;
          const double* qv = &qd[static_cast<size_t>((row * Hq + h) * D)];
          std::vector<double> sc(static_cast<size_t>(p + 1));
          double m = -1e300;
          for (int64_t j = 0; j <= p; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += qv[d] * K[s][static_cast<size_t>((j * Hk + kvh) * D + d)];
            sc[static_cast<size_t>(j)] = dot * scale;
            m = std::max(m, dot * scale);
          }
          double den = 0;
          for (double& x : sc) den += (x = std::exp(x - m));
          for (int64_t d = 0; d < D; ++d) {
            double acc = 0;
            for (int64_t j = 0; j <= p; ++j)
              acc += sc[static_cast<size_t>(j)] * V[s][static_cast<size_t>((j * Hk + kvh) * D + d)];
            out[static_cast<size_t>((row * Hq + h) * D + d)] = acc / den;
          }
        }
      }
    }
    return out;
  }
};

void run_case(const std::vector<SeqSpec>& seqs, int64_t Hq, int64_t Hk, int64_t D, int64_t BS, DType kv_dtype,
              DType q_dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  PagedBatch b(seqs, Hq, Hk, D, BS, kv_dtype, q_dtype, rng);
  HostTensor out(DType::kF32, {b.T, Hq, D});
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  ops::paged_attention(out.v, b.q.v, b.k_cache.v, b.v_cache.v, b.meta, static_cast<float>(scale));
  SCOPED_TRACE(::testing::Message() << "Hq=" << Hq << " Hk=" << Hk << " D=" << D << " BS=" << BS << " kv="
                                    << dtype_name(kv_dtype));
  test::expect_close_f32(out, b.reference(static_cast<float>(scale)), "paged_attention");
}

// Decodes at block boundaries, a prefill chunk over a cached prefix, a fresh prefill, and a chunk that
// ends exactly on a block boundary — all in one batch.
std::vector<SeqSpec> mixed_batch(int64_t BS) {
  return {{std::max<int64_t>(BS - 1, 1), 1}, {BS, 1}, {BS + 1, 1}, {3 * BS + 5, 7}, {17, 17}, {2 * BS, BS}, {1, 1}};
}

TEST(PagedAttention, MixedBatchOverGqaRatiosAndHeadDims) {
  uint32_t seed = 100;
  for (int64_t ratio : {1, 2, 4, 8})
    for (int64_t D : {16, 64, 128}) run_case(mixed_batch(16), 2 * ratio, 2, D, 16, DType::kF32, DType::kF32, seed++);
}

TEST(PagedAttention, OddBlockSizesAndSingleTokenBlocks) {
  uint32_t seed = 200;
  for (int64_t BS : {1, 5, 17}) run_case(mixed_batch(BS), 8, 2, 64, BS, DType::kF32, DType::kF32, seed++);
}

TEST(PagedAttention, LongPrefillAndDecodes) {
  // 129-token prefill (no prefix), a 129-token chunk after a 128-token prefix, several-block decodes.
  run_case({{129, 129}, {257, 129}, {15, 1}, {16 * 6, 1}}, 4, 1, 64, 16, DType::kF32, DType::kF32, 300);
}

TEST(PagedAttention, SingleSequenceSizes) {
  uint32_t seed = 400;
  for (int64_t n : {1, 15, 16, 17, 129}) {
    run_case({{n, n}}, 4, 4, 16, 16, DType::kF32, DType::kF32, seed++);  // prefill
    run_case({{n, 1}}, 4, 4, 16, 16, DType::kF32, DType::kF32, seed++);  // decode
  }
}

TEST(PagedAttention, HalfPrecisionCacheAndQueries) {
  run_case(mixed_batch(16), 8, 2, 64, 16, DType::kBF16, DType::kBF16, 500);
  run_case(mixed_batch(16), 8, 4, 128, 16, DType::kF16, DType::kF32, 501);
}

TEST(PagedAttention, PeakedScoresStayFinite) {
  // Large logits: softmax must subtract the max (exp(80) overflows nothing in fp64, but exp(800) would).
  std::mt19937 rng(600);
  PagedBatch b({{40, 3}, {20, 1}}, 2, 1, 16, 8, DType::kF32, DType::kF32, rng);
  HostTensor out(DType::kF32, {b.T, 2, 16});
  ops::paged_attention(out.v, b.q.v, b.k_cache.v, b.v_cache.v, b.meta, 400.0f);
  test::expect_close_f32(out, b.reference(400.0), "peaked");
}

TEST(PagedAttention, EmptySequenceInBatchIsSkipped) {
  // A sequence with no query rows this step (qlen 0) must not shift the others.
  std::mt19937 rng(700);
  PagedBatch b({{20, 2}, {9, 0}, {33, 1}}, 4, 2, 16, 8, DType::kF32, DType::kF32, rng);
  HostTensor out(DType::kF32, {b.T, 4, 16});
  ops::paged_attention(out.v, b.q.v, b.k_cache.v, b.v_cache.v, b.meta, 0.25f);
  test::expect_close_f32(out, b.reference(0.25), "qlen 0");
}

}  // namespace
}  // namespace nanovllm
