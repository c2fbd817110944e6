// The fp8 (e4m3 + per-row f32 scale) KV cache on the CPU (kernels/kv_cache.h, docs/kv_cache.md):
//  - the row quantization against an fp64 reference (nearest code by search, ties to even);
//  - the stores: qkv_prologue writes exactly the quantized rows of what it writes into an f32 cache;
//  - every op that reads the cache (paged, sparse decode and block-sparse prefill attention, Quest metadata, the
//    four prefill estimators, the page cache's fetch, the taps' gather) gives on the fp8 cache exactly what it gives
//    on the f32 cache holding the dequantized values (the kernels dequantize rows as they read them, nothing else
//    changes), and attention stays within a stated tolerance of the unquantized f32 and bf16 caches;
//  - malformed fp8 caches (no scales, wrong scale shape, scales on a bf16 cache) are refused by name.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.h"
#include "nanovllm/kernels/dual_chunk_ops.h"
#include "nanovllm/kernels/kv_cache.h"
#include "nanovllm/kernels/ops.h"
#include "nanovllm/kernels/page_cache_ops.h"
#include "nanovllm/kernels/pattern_estimators.h"
#include "nanovllm/kernels/sparse_ops.h"
#include "support/expect_error.h"

namespace nanovllm {
namespace {

using test::HostTensor;

double e4m3_value(uint32_t code) {  // by the format's definition (tests/core/dtype_test.cpp's)
  const int s = (code >> 7) & 1, e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

// The code nearest to q among the finite e4m3 values (ties: the even code), saturating at +-448.
uint8_t nearest_e4m3(double q) {
  uint32_t best = 0;
  double best_err = 1e300;
  for (uint32_t c = 0; c < 0x7f; ++c) {
    const double err = std::fabs(std::fabs(q) - e4m3_value(c));
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best_err = err;
      best = c;
    }
  }
  return static_cast<uint8_t>(best | (q < 0 ? 0x80u : 0u));
}

// A row of mixed magnitudes (2^-12 .. 2^8, both signs): scales and codes across the whole e4m3 range.
std::vector<float> mixed_row(int64_t D, std::mt19937& rng) {
  std::uniform_real_distribution<double> e(-12.0, 8.0);
  std::vector<float> x(static_cast<size_t>(D));
  for (int64_t d = 0; d < D; ++d) x[static_cast<size_t>(d)] = static_cast<float>(std::exp2(e(rng))) * (d % 3 ? 1 : -1);
  return x;
}

TEST(KvCacheFp8, RowQuantizationMatchesAnFp64Reference) {
  std::mt19937 rng(47);
  int64_t near_ties = 0, checked = 0;
  for (const int64_t D : {1, 15, 16, 64, 128, 129}) {
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<float> x = mixed_row(D, rng);
      if (rep == 1) std::fill(x.begin(), x.end(), 0.0f);      // a zero row: scale 1, codes 0
      if (rep == 2) x[static_cast<size_t>(D / 2)] = -3e-30f;  // amax tiny: scale underflows toward 0 -> 1... or not
      std::vector<uint8_t> codes(static_cast<size_t>(D));
      const float scale = quantize_fp8_kv_row(x.data(), D, codes.data());
      double amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(double{v}));
      const float want_scale = amax == 0 ? 1.0f : static_cast<float>(amax) / 448.0f;
      ASSERT_EQ(scale, want_scale > 0 ? want_scale : 1.0f) << "D " << D << " rep " << rep;
      std::vector<float> back(static_cast<size_t>(D));
      dequantize_fp8_kv_row(codes.data(), scale, D, back.data());
      for (int64_t d = 0; d < D; ++d) {
        const size_t i = static_cast<size_t>(d);
        const double q = double{x[i]} / double{scale};  // the exact quotient
        const uint8_t want = nearest_e4m3(q);
        // The kernel divides in f32 first: it may pick the other neighbour only when q lies within f32 rounding
        // (2^-24 relative) of the midpoint between two codes.
        if (codes[i] != want) {
          const double mid = (e4m3_value(codes[i]) + e4m3_value(want)) / 2;
          ASSERT_LE(std::fabs(q - mid), std::fabs(q) * 1e-7) << "D " << D << " d " << d << " x " << x[i];
          ++near_ties;
        }
        ++checked;
        // The element is the f32 product code x scale; |x - it| <= half a code step (2^-4 relative for normal
        // codes, 2^-10 x scale for subnormal ones), plus its f32 rounding.
        EXPECT_EQ(back[i], static_cast<float>(e4m3_value(codes[i])) * scale);
        EXPECT_LE(std::fabs(double{back[i]} - x[i]), std::fabs(double{x[i]}) / 16 * (1 + 1e-6) + std::ldexp(scale, -10))
            << "D " << D << " x " << x[i];
      }
      if (amax > 0 && scale == want_scale) {  // the largest element maps to +-448 exactly
        const auto it =
            std::max_element(x.begin(), x.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); });
        EXPECT_EQ(codes[static_cast<size_t>(it - x.begin())] & 0x7f, 0x7e) << "D " << D;
      }
    }
  }
  EXPECT_LE(near_ties, checked / 1000) << "f32-rounding ties should be rare";
}

// A paged cache of S sequences over shuffled blocks: K and V rows of varied magnitude (each row its own scale) in
// three forms: f32 (the unquantized truth), fp8 codes + scales (quantized row by row), and f32 holding the fp8's
// dequantized values. Unused slots hold large garbage in every form.
struct Caches {
  int64_t NB, BS, Hk, D;
  HostTensor k32, v32, k8, v8, ks, vs, kdq, vdq, kbf, vbf;

  Caches(int64_t nb, int64_t bs, int64_t hk, int64_t d, std::mt19937& rng) : NB(nb), BS(bs), Hk(hk), D(d) {
    const Shape shape{NB, BS, Hk, D}, rows{NB, BS, Hk};
    for (HostTensor* t : {&k32, &v32, &kdq, &vdq}) *t = HostTensor(DType::kF32, shape);
    for (HostTensor* t : {&kbf, &vbf}) *t = HostTensor(DType::kBF16, shape);
    for (HostTensor* t : {&k8, &v8}) *t = HostTensor(DType::kF8E4M3, shape);
    for (HostTensor* t : {&ks, &vs}) *t = HostTensor(DType::kF32, rows);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::uniform_real_distribution<float> mag(0.05f, 4.0f);
    for (int64_t r = 0; r < NB * BS * Hk; ++r) {
      const float m = mag(rng);
      for (int64_t d = 0; d < D; ++d) {
        k32.set(r * D + d, n(rng) * m);
        v32.set(r * D + d, n(rng) * m);
      }
      for (auto [src, codes, scales, dq, bf] :
           {std::tuple{&k32, &k8, &ks, &kdq, &kbf}, std::tuple{&v32, &v8, &vs, &vdq, &vbf}}) {
        const float* x = src->v.data_as<const float>() + r * D;
        uint8_t* c = codes->v.data_as<uint8_t>() + r * D;
        scales->v.data_as<float>()[r] = quantize_fp8_kv_row(x, D, c);
        dequantize_fp8_kv_row(c, scales->v.data_as<const float>()[r], D, dq->v.data_as<float>() + r * D);
        for (int64_t d = 0; d < D; ++d) bf->set(r * D + d, x[d]);
      }
    }
  }
  KvCacheTensor k_fp8() const { return {k8.v, ks.v}; }
  KvCacheTensor v_fp8() const { return {v8.v, vs.v}; }
};

// Sequences over a shuffled block table, with their step's query rows: a mixed batch (decodes first).
struct Batch {
  int64_t Hq, T = 0, S;
  std::vector<int32_t> ctx_v, q_len;
  HostTensor q, cu, ctx, bt, slots;
  AttentionMetadata meta;

  Batch(const Caches& c, int64_t hq, std::vector<int32_t> contexts, std::vector<int32_t> query_lens, std::mt19937& rng)
      : Hq(hq), S(static_cast<int64_t>(contexts.size())), ctx_v(std::move(contexts)), q_len(std::move(query_lens)) {
    std::vector<int32_t> ids(static_cast<size_t>(c.NB));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    int64_t MB = 1;
    for (int32_t n : ctx_v) MB = std::max<int64_t>(MB, (n + c.BS - 1) / c.BS);
    std::vector<int32_t> cu_v{0}, bt_v(static_cast<size_t>(S * MB), -1), slot_v;
    size_t next = 0;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t n = ctx_v[static_cast<size_t>(s)], ql = q_len[static_cast<size_t>(s)];
      for (int64_t b = 0; b < (n + c.BS - 1) / c.BS; ++b) bt_v[static_cast<size_t>(s * MB + b)] = ids.at(next++);
      for (int64_t p = n - ql; p < n; ++p)
        slot_v.push_back(static_cast<int32_t>(bt_v[static_cast<size_t>(s * MB + p / c.BS)] * c.BS + p % c.BS));
      T += ql;
      cu_v.push_back(static_cast<int32_t>(T));
    }
    std::mt19937 qrng(rng());
    q = test::random_tensor(DType::kF32, {T, Hq, c.D}, qrng, -2.0f, 2.0f);
    cu = test::i32_tensor(cu_v);
    ctx = test::i32_tensor(ctx_v);
    bt = test::i32_tensor(bt_v, {S, MB});
    slots = test::i32_tensor(slot_v);
    meta.num_seqs = S;
    meta.num_tokens = T;
    meta.max_query_len = *std::max_element(q_len.begin(), q_len.end());
    meta.max_context_len = *std::max_element(ctx_v.begin(), ctx_v.end());
    meta.cu_seqlens_q = cu.v;
    meta.context_lens = ctx.v;
    meta.block_tables = bt.v;
    meta.slot_mapping = slots.v;
    meta.block_size = c.BS;
    while (meta.num_leading_decodes < S && q_len[static_cast<size_t>(meta.num_leading_decodes)] == 1)
      ++meta.num_leading_decodes;
  }
  float scale(int64_t D) const { return 1.0f / std::sqrt(static_cast<float>(D)); }
};

void expect_identical(const HostTensor& a, const HostTensor& b, const char* what) {
  ASSERT_EQ(a.numel(), b.numel());
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.get(i), b.get(i)) << what << " element " << i;
}

TEST(KvCacheFp8, QkvPrologueStoresTheQuantizedRowsOfItsF32Store) {
  std::mt19937 rng(1);
  const int64_t T = 37, Hq = 8, Hk = 2, D = 64, NB = 6, BS = 16;
  HostTensor qkv = test::random_tensor(DType::kF32, {T, (Hq + 2 * Hk) * D}, rng, -3.0f, 3.0f);
  HostTensor qn = test::random_tensor(DType::kF32, {D}, rng, 0.5f, 1.5f),
             kn = test::random_tensor(DType::kF32, {D}, rng, 0.5f, 1.5f);
  std::vector<int32_t> pos_v(T), slot_v(T);
  for (int64_t t = 0; t < T; ++t) {
    pos_v[static_cast<size_t>(t)] = static_cast<int32_t>(100 + 3 * t);
    slot_v[static_cast<size_t>(t)] = t == 5 ? -1 : static_cast<int32_t>((t * 7) % (NB * BS));  // one padding row
  }
  std::vector<float> inv(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) inv[static_cast<size_t>(i)] = std::pow(10000.0f, -2.0f * i / D);
  const TensorView inv_freq(inv.data(), DType::kF32, Shape{D / 2});
  const HostTensor pos = test::i32_tensor(pos_v), slots = test::i32_tensor(slot_v);
  AttentionMetadata meta;
  meta.num_tokens = T;
  meta.slot_mapping = slots.v;
  meta.block_size = BS;
  HostTensor q32(DType::kF32, {T, Hq, D}), q8(DType::kF32, {T, Hq, D});
  HostTensor k32(DType::kF32, {NB, BS, Hk, D}), v32(DType::kF32, {NB, BS, Hk, D});
  HostTensor k8(DType::kF8E4M3, {NB, BS, Hk, D}), v8(DType::kF8E4M3, {NB, BS, Hk, D});
  HostTensor ks(DType::kF32, {NB, BS, Hk}), vs(DType::kF32, {NB, BS, Hk});
  std::fill(k8.bytes.begin(), k8.bytes.end(), 0x55);  // garbage where nothing is written
  std::fill(ks.v.data_as<float>(), ks.v.data_as<float>() + ks.numel(), -7.0f);
  ops::qkv_prologue(q32.v, qkv.v, qn.v, kn.v, 1e-6f, pos.v, {.inv_freq = inv_freq}, k32.v, v32.v, meta);
  ops::qkv_prologue(q8.v, qkv.v, qn.v, kn.v, 1e-6f, pos.v, {.inv_freq = inv_freq}, KvCacheTensor(k8.v, ks.v),
                    KvCacheTensor(v8.v, vs.v), meta);
  expect_identical(q8, q32, "q");
  std::vector<bool> written(static_cast<size_t>(NB * BS), false);
  for (int32_t s : slot_v)
    if (s >= 0) written[static_cast<size_t>(s)] = true;
  for (int64_t slot = 0; slot < NB * BS; ++slot)
    for (int64_t h = 0; h < Hk; ++h) {
      const int64_t r = slot * Hk + h;
      if (!written[static_cast<size_t>(slot)]) {
        EXPECT_EQ(ks.v.data_as<float>()[r], -7.0f) << "slot " << slot << " was not written";
        continue;
      }
      for (auto [src, codes, scales] : {std::tuple{&k32, &k8, &ks}, std::tuple{&v32, &v8, &vs}}) {
        std::vector<uint8_t> want(static_cast<size_t>(D));
        const float scale = quantize_fp8_kv_row(src->v.data_as<const float>() + r * D, D, want.data());
        ASSERT_EQ(scales->v.data_as<const float>()[r], scale) << "row " << r;
        for (int64_t d = 0; d < D; ++d)
          ASSERT_EQ(codes->v.data_as<const uint8_t>()[r * D + d], want[static_cast<size_t>(d)]);
      }
    }
}

// GQA ratios 1, 4 and 8; block boundaries; a mixed batch of decodes and prefill chunks after a prefix.
TEST(KvCacheFp8, PagedAttentionEqualsTheDequantizedCacheAndStaysNearTheUnquantizedOne) {
  struct Case {
    int64_t Hq, Hk, D, BS;
    std::vector<int32_t> ctx, ql;
  };
  const std::vector<Case> cases = {{4, 4, 16, 16, {1, 17, 33}, {1, 1, 33}},
                                   {8, 2, 64, 16, {129, 16, 47}, {1, 16, 15}},
                                   {16, 2, 128, 32, {257, 64}, {1, 31}},
                                   {8, 1, 32, 8, {15, 9}, {15, 1}}};
  std::mt19937 rng(2);
  for (const Case& c : cases) {
    int64_t blocks = 0;
    for (int32_t n : c.ctx) blocks += (n + c.BS - 1) / c.BS;
    Caches cache(blocks + 2, c.BS, c.Hk, c.D, rng);
    Batch b(cache, c.Hq, c.ctx, c.ql, rng);
    HostTensor fp8(DType::kF32, {b.T, c.Hq, c.D}), dq(DType::kF32, {b.T, c.Hq, c.D}),
        f32(DType::kF32, {b.T, c.Hq, c.D}), bf(DType::kF32, {b.T, c.Hq, c.D});
    ops::paged_attention(fp8.v, b.q.v, cache.k_fp8(), cache.v_fp8(), b.meta, b.scale(c.D));
    ops::paged_attention(dq.v, b.q.v, cache.kdq.v, cache.vdq.v, b.meta, b.scale(c.D));
    ops::paged_attention(f32.v, b.q.v, cache.k32.v, cache.v32.v, b.meta, b.scale(c.D));
    ops::paged_attention(bf.v, b.q.v, cache.kbf.v, cache.vbf.v, b.meta, b.scale(c.D));
    expect_identical(fp8, dq, "fp8 vs its dequantized cache");
    // Against the unquantized cache: e4m3 keeps 3 mantissa bits (relative error <= 2^-4 per element, ~3.6% rms),
    // which V passes on to the output and K to the scores. Measured NMSE on these shapes: 1.4e-3 .. 2.5e-3
    // against f32, the same against bf16 (whose own error is 5e-6 .. 1e-5).
    const double vs_f32 = test::nmse(fp8, f32.to_double()), vs_bf16 = test::nmse(fp8, bf.to_double());
    EXPECT_LT(vs_f32, 5e-3) << "Hq " << c.Hq << " Hk " << c.Hk << " D " << c.D;
    EXPECT_LT(vs_bf16, 5e-3) << "Hq " << c.Hq << " Hk " << c.Hk << " D " << c.D;
    EXPECT_LT(test::nmse(bf, f32.to_double()), 1e-4);  // the bf16 cache itself, for scale
  }
}

// A random Quest selection of at most K pages per (sequence, KV head) of b's decodes, in increasing order, -1 after.
HostTensor random_selection(const Batch& b, int64_t Hk, int64_t K, int64_t BS, std::mt19937& rng) {
  HostTensor sel(DType::kI32, {b.S, Hk, K});
  for (int64_t s = 0; s < b.S; ++s)
    for (int64_t h = 0; h < Hk; ++h) {
      const int64_t pages = (b.ctx_v[static_cast<size_t>(s)] + BS - 1) / BS;
      std::vector<int32_t> all(static_cast<size_t>(pages));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      all.resize(static_cast<size_t>(std::min<int64_t>(K, pages)));
      std::sort(all.begin(), all.end());
      for (int64_t j = 0; j < K; ++j)
        sel.i32()[(s * Hk + h) * K + j] = j < static_cast<int64_t>(all.size()) ? all[static_cast<size_t>(j)] : -1;
    }
  return sel;
}

// A random block-sparse pattern in bc [Hk, NQB], bi [Hk, NQB, NQB]: each causal key block kept with probability 1/2,
// the diagonal always.
ops::BlockSparsePattern random_pattern(HostTensor& bc, HostTensor& bi, int64_t bs, std::mt19937& rng) {
  const int64_t Hk = bc.v.dim(0), NQB = bc.v.dim(1);
  std::bernoulli_distribution keep(0.5);
  for (int64_t h = 0; h < Hk; ++h)
    for (int64_t i = 0; i < NQB; ++i) {
      int32_t n = 0;
      for (int64_t j = 0; j <= i; ++j)
        if (j == i || keep(rng)) bi.i32()[(h * NQB + i) * NQB + n++] = static_cast<int32_t>(j);
      bc.i32()[h * NQB + i] = n;
    }
  ops::BlockSparsePattern p;
  p.block_size = bs;
  p.block_counts = bc.v;
  p.block_index = bi.v;
  return p;
}

TEST(KvCacheFp8, SparseDecodeAndBlockSparsePrefillEqualTheDequantizedCache) {
  std::mt19937 rng(3);
  const int64_t Hq = 8, Hk = 2, D = 64, BS = 16;
  {  // sparse decode: three sequences, a random selection per (sequence, KV head)
    Caches cache(40, BS, Hk, D, rng);
    Batch b(cache, Hq, {200, 17, 129}, {1, 1, 1}, rng);
    const int64_t K = 5;
    const HostTensor sel = random_selection(b, Hk, K, BS, rng);
    HostTensor scratch(DType::kI32, {ops::sparse_decode_scratch_ints(3, Hk, K, BS)});
    HostTensor fp8(DType::kF32, {3, Hq, D}), dq(DType::kF32, {3, Hq, D});
    ops::sparse_decode_attention(fp8.v, b.q.v, cache.k_fp8(), cache.v_fp8(), b.bt.v, b.ctx.v, sel.v, b.scale(D),
                                 scratch.v);
    ops::sparse_decode_attention(dq.v, b.q.v, cache.kdq.v, cache.vdq.v, b.bt.v, b.ctx.v, sel.v, b.scale(D), scratch.v);
    expect_identical(fp8, dq, "sparse decode");
  }
  {  // block-sparse prefill: a chunk of 70 rows after a prefix of 130, a random pattern with the diagonal
    Caches cache(16, BS, Hk, D, rng);
    Batch b(cache, Hq, {200}, {70}, rng);
    const int64_t bs = 32, NQB = (200 + bs - 1) / bs;
    HostTensor bc(DType::kI32, {Hk, NQB}), bi(DType::kI32, {Hk, NQB, NQB});
    const ops::BlockSparsePattern p = random_pattern(bc, bi, bs, rng);
    HostTensor fp8(DType::kF32, {70, Hq, D}), dq(DType::kF32, {70, Hq, D});
    ops::block_sparse_prefill_attention(fp8.v, b.q.v, cache.k_fp8(), cache.v_fp8(), b.meta, p, b.scale(D));
    ops::block_sparse_prefill_attention(dq.v, b.q.v, cache.kdq.v, cache.vdq.v, b.meta, p, b.scale(D));
    expect_identical(fp8, dq, "block-sparse prefill");
  }
}

TEST(KvCacheFp8, QuestMetadataBoundsTheDequantizedKeys) {
  std::mt19937 rng(4);
  const int64_t Hk = 2, D = 32, BS = 16, NB = 5;
  Caches cache(NB, BS, Hk, D, rng);
  std::vector<int32_t> slot_v(static_cast<size_t>(NB * BS));
  std::iota(slot_v.begin(), slot_v.end(), 0);
  const HostTensor slots = test::i32_tensor(slot_v);
  HostTensor min8(DType::kF32, {NB, Hk, D}), max8(DType::kF32, {NB, Hk, D}), mindq(DType::kF32, {NB, Hk, D}),
      maxdq(DType::kF32, {NB, Hk, D}), minbf(DType::kBF16, {NB, Hk, D}), maxbf(DType::kBF16, {NB, Hk, D});
  ops::quest_update_pages(min8.v, max8.v, cache.k_fp8(), slots.v);
  ops::quest_update_pages(mindq.v, maxdq.v, cache.kdq.v, slots.v);
  ops::quest_update_pages(minbf.v, maxbf.v, cache.k_fp8(), slots.v);
  expect_identical(min8, mindq, "k_min");
  expect_identical(max8, maxdq, "k_max");
  // BF16 metadata of an fp8 cache: rounded outward, so still a bound, and within one bf16 step of the exact one.
  int64_t rounded = 0;
  for (int64_t i = 0; i < min8.numel(); ++i) {
    const float lo = min8.get(i), hi = max8.get(i), blo = minbf.get(i), bhi = maxbf.get(i);
    ASSERT_LE(blo, lo);
    ASSERT_GE(bhi, hi);
    EXPECT_LE(lo - blo, std::fabs(lo) / 128);
    EXPECT_LE(bhi - hi, std::fabs(hi) / 128);
    rounded += (blo != lo) + (bhi != hi);
  }
  EXPECT_GT(rounded, 0) << "the test should exercise the outward rounding";
}

// The pattern estimator `which` (0 xattention, 1 vertical-slash, 2 flexprefill, 3 avgpool) of b's one chunk (blocks of
// 32) on cache k, flattened: per (KV head, query block of the chunk) the count, the blocks, (vertical-slash) the columns.
std::vector<int32_t> estimate(const Batch& b, const KvCacheTensor& k, int which, TensorView q,
                              const ops::DualChunkParams* dca) {
  const int64_t Hk = k.dim(2), D = k.dim(3), ctx = b.ctx_v[0], T = b.T, bs = 32, NQB = (ctx + bs - 1) / bs;
  HostTensor bc(DType::kI32, {Hk, NQB}), bi(DType::kI32, {Hk, NQB, NQB}), cc(DType::kI32, {Hk, NQB}),
      ci(DType::kI32, {Hk, NQB, ctx});
  std::vector<int32_t> out;
  ops::BlockSparsePattern p{
      .block_size = bs, .block_counts = bc.v, .block_index = bi.v, .column_counts = cc.v, .column_index = ci.v};
  const float sc = b.scale(D);
  switch (which) {
    case 0:
      ops::xattention_estimate(p, q, k, b.meta, sc, {.stride = 8, .threshold = 0.8}, dca);
      break;
    case 1:
      ops::vertical_slash_estimate(p, q, k, b.meta, sc, {.last_q = 16, .vertical = 40, .slash = 30}, dca);
      break;
    case 2:
      ops::flexprefill_estimate(p, q, k, b.meta, sc, {.gamma = 0.8, .min_budget = 32}, dca);
      break;
    default:
      ops::avgpool_estimate(p, q, k, b.meta, sc, {.threshold = 0.8}, dca);
      break;
  }
  for (int64_t h = 0; h < Hk; ++h)
    for (int64_t i = (ctx - T) / bs; i < NQB; ++i) {
      const int32_t n = bc.i32()[h * NQB + i], nc = cc.i32()[h * NQB + i];
      out.push_back(n);
      out.insert(out.end(), bi.i32() + (h * NQB + i) * NQB, bi.i32() + (h * NQB + i) * NQB + n);
      if (which == 1) out.insert(out.end(), ci.i32() + (h * NQB + i) * ctx, ci.i32() + (h * NQB + i) * ctx + nc);
    }
  return out;
}

TEST(KvCacheFp8, Int4KeysOfTheFp8CacheAreThoseOfTheDequantizedKeys) {
  std::mt19937 rng(6);
  const int64_t Hk = 2, D = 64, BS = 16, NB = 4;
  Caches cache(NB, BS, Hk, D, rng);
  std::vector<int32_t> slot_v(static_cast<size_t>(NB * BS));
  std::iota(slot_v.begin(), slot_v.end(), 0);
  const HostTensor slots = test::i32_tensor(slot_v);
  HostTensor codes8(DType::kU8, {NB, Hk, BS, D / 2}), codesdq(DType::kU8, {NB, Hk, BS, D / 2});
  HostTensor scales8(DType::kF32, {NB, Hk, BS}), scalesdq(DType::kF32, {NB, Hk, BS});
  ops::int4_keys_update(codes8.v, scales8.v, cache.k_fp8(), slots.v);
  ops::int4_keys_update(codesdq.v, scalesdq.v, cache.kdq.v, slots.v);
  EXPECT_EQ(codes8.bytes, codesdq.bytes);
  expect_identical(scales8, scalesdq, "scales");
}

TEST(KvCacheFp8, PrefillEstimatorsSeeTheDequantizedKeys) {
  std::mt19937 rng(5);
  const int64_t Hq = 8, Hk = 2, D = 32, BS = 16, ctx = 300, T = 120;
  Caches cache(22, BS, Hk, D, rng);
  Batch b(cache, Hq, {static_cast<int32_t>(ctx)}, {static_cast<int32_t>(T)}, rng);
  const auto run = [&](const KvCacheTensor& k, int which) { return estimate(b, k, which, b.q.v, nullptr); };
  for (int which = 0; which < 4; ++which)
    EXPECT_EQ(run(cache.k_fp8(), which), run(cache.kdq.v, which)) << "estimator " << which;
}

// The CPU kernels of the sparse ops read cache rows through load_kv_row on their Dual Chunk Attention paths too (q in
// its three rotations), so they give the dequantized cache's results exactly. (The engine still refuses fp8 with
// Dual Chunk Attention: the dense DCA attention and its qkv prologue, and every CUDA DCA kernel, read a cache of the
// activation dtype; the CUDA ones refuse an fp8 cache by name.)
TEST(KvCacheFp8, DualChunkSparseOpsOnTheCpuEqualTheDequantizedCache) {
  std::mt19937 rng(7);
  const int64_t Hq = 8, Hk = 2, D = 32, BS = 16;
  const ops::DualChunkParams dca{.chunk_len = 64, .chunk_size = 80};  // chunks of 64 positions, 2 to 5 per sequence
  {  // sparse decode
    Caches cache(40, BS, Hk, D, rng);
    Batch b(cache, Hq, {200, 17, 129}, {1, 1, 1}, rng);
    const int64_t K = 6;
    const HostTensor sel = random_selection(b, Hk, K, BS, rng);
    const HostTensor q3 = test::random_tensor(DType::kF32, {3, 3, Hq, D}, rng, -2.0f, 2.0f);
    HostTensor scratch(DType::kI32, {ops::sparse_decode_scratch_ints(3, Hk, K, BS)});
    HostTensor fp8(DType::kF32, {3, Hq, D}), dq(DType::kF32, {3, Hq, D});
    ops::sparse_decode_attention(fp8.v, q3.v, cache.k_fp8(), cache.v_fp8(), b.bt.v, b.ctx.v, sel.v, b.scale(D),
                                 scratch.v, &dca);
    ops::sparse_decode_attention(dq.v, q3.v, cache.kdq.v, cache.vdq.v, b.bt.v, b.ctx.v, sel.v, b.scale(D), scratch.v,
                                 &dca);
    expect_identical(fp8, dq, "sparse decode, Dual Chunk Attention");
  }
  {  // block-sparse prefill: 70 rows after a prefix of 130
    Caches cache(16, BS, Hk, D, rng);
    Batch b(cache, Hq, {200}, {70}, rng);
    const int64_t bs = 32, NQB = (200 + bs - 1) / bs;
    HostTensor bc(DType::kI32, {Hk, NQB}), bi(DType::kI32, {Hk, NQB, NQB});
    const ops::BlockSparsePattern p = random_pattern(bc, bi, bs, rng);
    const HostTensor q3 = test::random_tensor(DType::kF32, {3, 70, Hq, D}, rng, -2.0f, 2.0f);
    HostTensor fp8(DType::kF32, {70, Hq, D}), dq(DType::kF32, {70, Hq, D});
    ops::block_sparse_prefill_attention(fp8.v, q3.v, cache.k_fp8(), cache.v_fp8(), b.meta, p, b.scale(D), &dca);
    ops::block_sparse_prefill_attention(dq.v, q3.v, cache.kdq.v, cache.vdq.v, b.meta, p, b.scale(D), &dca);
    expect_identical(fp8, dq, "block-sparse prefill, Dual Chunk Attention");
  }
  {  // the estimators: 120 rows after a prefix of 180
    Caches cache(22, BS, Hk, D, rng);
    Batch b(cache, Hq, {300}, {120}, rng);
    const HostTensor q3 = test::random_tensor(DType::kF32, {3, 120, Hq, D}, rng, -2.0f, 2.0f);
    for (int which = 0; which < 4; ++which)
      EXPECT_EQ(estimate(b, cache.k_fp8(), which, q3.v, &dca), estimate(b, cache.kdq.v, which, q3.v, &dca))
          << "estimator " << which << ", Dual Chunk Attention";
  }
}

TEST(KvCacheFp8, PageCacheFetchMovesCodesWithTheirScales) {
  std::mt19937 rng(6);
  const int64_t Hk = 2, D = 16, ps = 4, C = 3, K = 3, P = 6, N = P * ps, host_tokens = 22;
  Caches host(1, N, Hk, D, rng);  // the host pool [N, Hk, D] (one block of N tokens)
  HostTensor dk(DType::kF8E4M3, {N, Hk, D}), dv(DType::kF8E4M3, {N, Hk, D}), dks(DType::kF32, {N, Hk}),
      dvs(DType::kF32, {N, Hk}), ck(DType::kF8E4M3, {C, ps, Hk, D}), cv(DType::kF8E4M3, {C, ps, Hk, D}),
      cks(DType::kF32, {C, ps, Hk}), cvs(DType::kF32, {C, ps, Hk});
  HostTensor page_slot(DType::kI32, {Hk, P}), slot_page(DType::kI32, {Hk, C}), stamp(DType::kI32, {Hk, C}),
      hand(DType::kI32, {Hk}), counters(DType::kI64, {2}), plan(DType::kI32, {1, Hk, K, 2});
  const ops::PageCacheState state{page_slot.v, slot_page.v, stamp.v, hand.v};
  ops::page_cache_reset(state, counters.v);
  // The host pool's scales head-major [Hk, N], as page_cache_store_scales writes them.
  HostTensor hks(DType::kF32, {Hk, N}), hvs(DType::kF32, {Hk, N});
  ops::page_cache_store_scales(hks.v, host.ks.v.reshape({N, Hk}), 0);
  ops::page_cache_store_scales(hvs.v, host.vs.v.reshape({N, Hk}), 0);
  const KvCacheTensor hk(host.k8.v.reshape({N, Hk, D}), hks.v), hv(host.v8.v.reshape({N, Hk, D}), hvs.v);
  const KvCacheTensor dst_k(dk.v, dks.v), dst_v(dv.v, dvs.v), cache_k(ck.v, cks.v), cache_v(cv.v, cvs.v);
  // Step 0 fetches pages {0, 2, 5} (5 straddles the pool's end: uncached) from the host; step 1 pages {0, 2, 3}:
  // 0 and 2 hit the cache.
  const std::vector<std::vector<int32_t>> steps = {{0, 2, 5, 1, 2, 5}, {0, 2, 3, 0, 2, 3}};
  for (int32_t step = 0; step < 2; ++step) {
    std::fill(dk.bytes.begin(), dk.bytes.end(), 0);
    std::fill(dks.v.data_as<float>(), dks.v.data_as<float>() + dks.numel(), 0.0f);
    std::fill(dvs.v.data_as<float>(), dvs.v.data_as<float>() + dvs.numel(), 0.0f);
    const HostTensor sel = test::i32_tensor(steps[static_cast<size_t>(step)], {1, Hk, K});
    ops::page_cache_plan(plan.v, sel.v, state, host_tokens, ps, step, counters.v);
    ops::page_cache_fetch(dst_k, dst_v, hk, hv, cache_k, cache_v, sel.v, plan.v, host_tokens);
    for (int64_t h = 0; h < Hk; ++h)
      for (int64_t j = 0; j < K; ++j) {
        const int64_t p = steps[static_cast<size_t>(step)][static_cast<size_t>(h * K + j)];
        for (int64_t r = p * ps; r < std::min((p + 1) * ps, host_tokens); ++r) {
          const int64_t row = r * Hk + h;
          ASSERT_EQ(dks.v.data_as<float>()[row], host.ks.v.data_as<float>()[row]) << "step " << step << " row " << r;
          ASSERT_EQ(dvs.v.data_as<float>()[row], host.vs.v.data_as<float>()[row]);
          for (int64_t d = 0; d < D; ++d)
            ASSERT_EQ(dk.bytes[static_cast<size_t>(row * D + d)], host.k8.bytes[static_cast<size_t>(row * D + d)]);
        }
      }
  }
  EXPECT_EQ(counters.v.data_as<int64_t>()[0], 3) << "step 1's pages 0, 2 (head 0) and 2 (head 1) come from the cache";
}

TEST(KvCacheFp8, GatherKvRowsDequantizes) {
  std::mt19937 rng(7);
  Caches cache(3, 8, 2, 24, rng);
  const HostTensor slots = test::i32_tensor({5, 0, 23, 11});
  HostTensor a(DType::kF32, {4, 2, 24}), want(DType::kF32, {4, 2, 24});
  ops::gather_kv_rows(a.v, cache.k_fp8(), slots.v);
  ops::gather_kv_rows(want.v, cache.kdq.v, slots.v);
  expect_identical(a, want, "gathered rows");
  EXPECT_EQ(a.get(0), cache.kdq.get(5 * 2 * 24));
}

TEST(KvCacheFp8, MalformedCachesAreRefused) {
  std::mt19937 rng(8);
  Caches cache(4, 16, 2, 32, rng);
  Batch b(cache, 4, {20}, {1}, rng);
  HostTensor out(DType::kF32, {1, 4, 32}), wrong(DType::kF32, {4, 16});
  const float sc = b.scale(32);
  using testing::expect_error;
  expect_error([&] { ops::paged_attention(out.v, b.q.v, cache.k8.v, cache.v8.v, b.meta, sc); },
               {"paged_attention", "k_cache is F8_E4M3 but has no scales"});
  expect_error(
      [&] { ops::paged_attention(out.v, b.q.v, KvCacheTensor(cache.k8.v, wrong.v), cache.v_fp8(), b.meta, sc); },
      {"paged_attention", "k_cache.scale", "rank 3"});
  expect_error(
      [&] { ops::paged_attention(out.v, b.q.v, KvCacheTensor(cache.kbf.v, cache.ks.v), cache.vbf.v, b.meta, sc); },
      {"paged_attention", "k_cache is BF16 and has scales"});
  expect_error([&] { ops::paged_attention(out.v, b.q.v, cache.k_fp8(), cache.vbf.v, b.meta, sc); },
               {"paged_attention", "k_cache is F8_E4M3 but v_cache is BF16"});
  HostTensor lo(DType::kF16, {4, 2, 32}), hi(DType::kF16, {4, 2, 32});
  expect_error([&] { ops::quest_update_pages(lo.v, hi.v, cache.k_fp8(), b.slots.v); },
               {"quest_update_pages", "must be F32 or BF16"});
}

}  // namespace
}  // namespace nanovllm
