// Dual Chunk Attention on the CPU against an independent float64 reference written from vLLM's rules
// (DualChunkRotaryEmbedding._compute_cos_sin_cache, DualChunkFlashAttentionImpl; docs/dual_chunk_attention.md),
// not from the kernels: from each token's raw q/k/v (the qkv projection's output) it normalises, rotates the key
// at j mod L and the query at the rotation of the key's region, scales both by the length factor of the token
// that wrote them, and takes one softmax over keys 0..p. The kernels write the cache in two steps (a cached
// prefix, then the step's chunk, decodes and whole prompts) and merge three partial attentions by their
// log-sum-exps: a different formulation of the same numbers.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.h"
#include "nanovllm/core/dtype.h"
#include "nanovllm/kernels/dual_chunk_ops.h"
#include "nanovllm/kernels/ops.h"
#include "support/expect_error.h"

namespace nanovllm {
namespace {

using test::HostTensor;

TEST(DualChunkParams, RotationPositionsAndLengthScaleFollowTheReference) {
  // chunk_size 10, local_size 3: L = 7. vLLM: q_t = arange(L), qc_t = (arange(L) + L).clamp(max=chunk_size),
  // k_t = arange(max_pos) % L, q_inter = qc_t[L - 1].
  const ops::DualChunkParams d{.chunk_len = 7, .chunk_size = 10, .original_max_position_embeddings = 100};
  const int want_succ[7] = {7, 8, 9, 10, 10, 10, 10};
  for (int64_t p = 0; p < 30; ++p) {
    EXPECT_EQ(d.intra_position(p), p % 7);
    EXPECT_EQ(d.successive_position(p), want_succ[p % 7]) << p;
  }
  EXPECT_EQ(d.inter_position(), 10);
  const ops::DualChunkParams wide{.chunk_len = 7, .chunk_size = 20};  // 2 L - 1 = 13 < chunk_size: unclamped
  EXPECT_EQ(wide.inter_position(), 13);
  EXPECT_EQ(wide.successive_position(6), 13);
  // (0.1 * log(n / original) + 1).clip(min=1)
  EXPECT_FLOAT_EQ(ops::dual_chunk_length_scale(50, 100), 1.0f);
  EXPECT_FLOAT_EQ(ops::dual_chunk_length_scale(100, 100), 1.0f);
  EXPECT_FLOAT_EQ(ops::dual_chunk_length_scale(1000, 100), static_cast<float>(0.1 * std::log(10.0) + 1.0));
  EXPECT_FLOAT_EQ(ops::dual_chunk_length_scale(1000000, 0), 1.0f);  // no original_max_position_embeddings
  // Qwen2.5-7B-Instruct-1M at 1M tokens.
  EXPECT_NEAR(ops::dual_chunk_length_scale(1 << 20, 262144), 1.0 + 0.1 * std::log(4.0), 1e-6);
}

// One sequence of a test batch: `cached` positions already in the cache, `fresh` written and attended by the
// step; positions below `prompt` are prompt tokens (scale length = prompt), the rest generated (position + 1).
struct SeqCase {
  int64_t cached, fresh, prompt;
};

struct BatchCase {
  ops::DualChunkParams dca;
  std::vector<SeqCase> seqs;
  int64_t Hq, Hk, D, BS;
  bool norms;
  DType dtype;  // queries and caches
};

std::vector<double> rms(std::vector<double> x, const std::vector<double>* w, double eps) {
  if (w == nullptr) return x;
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (*w)[i] * (x[i] * r);
  return x;
}

// rotate_half RoPE at `pos` with the given frequencies, in float64.
std::vector<double> rotate(const std::vector<double>& x, int64_t pos, const std::vector<double>& inv_freq) {
  const size_t half = x.size() / 2;
  std::vector<double> o(x.size());
  for (size_t i = 0; i < half; ++i) {
    const double a = static_cast<double>(pos) * inv_freq[i];
    o[i] = x[i] * std::cos(a) - x[i + half] * std::sin(a);
    o[i + half] = x[i + half] * std::cos(a) + x[i] * std::sin(a);
  }
  return o;
}

void run(const BatchCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t S = static_cast<int64_t>(c.seqs.size()), Hq = c.Hq, Hk = c.Hk, D = c.D, BS = c.BS, G = Hq / Hk;
  const int64_t W = (Hq + 2 * Hk) * D, L = c.dca.chunk_len;
  const double eps = 1e-6;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Frequencies of a small theta so that positions a few chunks apart rotate far.
  HostTensor inv(DType::kF32, {D / 2});
  for (int64_t i = 0; i < D / 2; ++i)
    inv.set(i, static_cast<float>(std::pow(500.0, -2.0 * static_cast<double>(i) / static_cast<double>(D))));
  const std::vector<double> inv_d = inv.to_double();
  HostTensor qn = test::random_tensor(DType::kF32, {D}, rng, 0.5f, 1.5f);
  HostTensor kn = test::random_tensor(DType::kF32, {D}, rng, 0.5f, 1.5f);
  const std::vector<double> qw = qn.to_double(), kw = kn.to_double();

  // Block tables: each sequence's blocks, shuffled over the cache.
  int64_t total_blocks = 0;
  for (const SeqCase& s : c.seqs) total_blocks += (s.cached + s.fresh + BS - 1) / BS;
  const int64_t NB = total_blocks + 3;
  std::vector<int32_t> ids(static_cast<size_t>(NB));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(S));
  int64_t MB = 1, next = 0;
  for (int64_t s = 0; s < S; ++s) {
    const SeqCase& q = c.seqs[static_cast<size_t>(s)];
    for (int64_t b = 0; b < (q.cached + q.fresh + BS - 1) / BS; ++b)
      tables[static_cast<size_t>(s)].push_back(ids[static_cast<size_t>(next++)]);
    MB = std::max<int64_t>(MB, static_cast<int64_t>(tables[static_cast<size_t>(s)].size()));
  }
  std::vector<int32_t> bt(static_cast<size_t>(S * MB), -1);
  for (int64_t s = 0; s < S; ++s)
    std::copy(tables[static_cast<size_t>(s)].begin(), tables[static_cast<size_t>(s)].end(), bt.begin() + s * MB);
  HostTensor block_tables = test::i32_tensor(bt, {S, MB});

  // Raw qkv rows of every position of every sequence (stored as the step inputs' dtype).
  std::vector<std::vector<std::vector<double>>> raw(static_cast<size_t>(S));
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  for (int64_t s = 0; s < S; ++s) {
    const SeqCase& q = c.seqs[static_cast<size_t>(s)];
    for (int64_t p = 0; p < q.cached + q.fresh; ++p) {
      std::vector<double> row(static_cast<size_t>(W));
      for (double& v : row) {  // the values the step's qkv tensor holds
        const float x = u(rng);
        v = c.dtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(x)) : x;
      }
      raw[static_cast<size_t>(s)].push_back(row);
    }
  }
  auto slot_of = [&](int64_t s, int64_t p) {
    return tables[static_cast<size_t>(s)][static_cast<size_t>(p / BS)] * BS + p % BS;
  };
  auto scale_len = [&](int64_t s, int64_t p) {
    const SeqCase& q = c.seqs[static_cast<size_t>(s)];
    return p < q.prompt ? q.prompt : p + 1;
  };

  HostTensor kc(c.dtype, {NB, BS, Hk, D}), vc(c.dtype, {NB, BS, Hk, D});
  const ops::RopeParams rope{inv.v, 1.0f, false};
  // One step of the kernels: positions [first(s), first(s) + count(s)) of every sequence; attention only in the
  // second step. Returns the attention output [T, Hq, D] (second step).
  auto step = [&](bool second) {
    std::vector<int32_t> pos, slots, lens, cu{0}, ctx;
    std::vector<float> x;
    int64_t max_q = 0, max_ctx = 0, T = 0;
    for (int64_t s = 0; s < S; ++s) {
      const SeqCase& q = c.seqs[static_cast<size_t>(s)];
      const int64_t first = second ? q.cached : 0, count = second ? q.fresh : q.cached;
      for (int64_t p = first; p < first + count; ++p) {
        pos.push_back(static_cast<int32_t>(p));
        slots.push_back(static_cast<int32_t>(slot_of(s, p)));
        lens.push_back(static_cast<int32_t>(scale_len(s, p)));
        for (double v : raw[static_cast<size_t>(s)][static_cast<size_t>(p)]) x.push_back(static_cast<float>(v));
      }
      T += count;
      cu.push_back(static_cast<int32_t>(T));
      ctx.push_back(static_cast<int32_t>(first + count));
      max_q = std::max(max_q, count);
      max_ctx = std::max(max_ctx, first + count);
    }
    HostTensor qkv(c.dtype, {T, W});
    for (int64_t i = 0; i < qkv.numel(); ++i) qkv.set(i, x[static_cast<size_t>(i)]);
    HostTensor positions = test::i32_tensor(pos), slot_t = test::i32_tensor(slots), len_t = test::i32_tensor(lens);
    HostTensor cu_t = test::i32_tensor(cu), ctx_t = test::i32_tensor(ctx);
    AttentionMetadata meta;
    meta.num_seqs = S;
    meta.num_tokens = T;
    meta.max_query_len = max_q;
    meta.max_context_len = max_ctx;
    meta.cu_seqlens_q = cu_t.v;
    meta.context_lens = ctx_t.v;
    meta.block_tables = block_tables.v;
    meta.slot_mapping = slot_t.v;
    meta.block_size = BS;
    meta.dca_scale_lens = len_t.v;
    HostTensor q3(c.dtype, {3, T, Hq, D}), out(c.dtype, {T, Hq, D});
    ops::dual_chunk_qkv_prologue(q3.v, qkv.v, c.norms ? qn.v : TensorView(), c.norms ? kn.v : TensorView(),
                                 static_cast<float>(eps), positions.v, rope, c.dca, kc.v, vc.v, meta);
    if (second) ops::dual_chunk_attention(out.v, q3.v, kc.v, vc.v, meta, c.dca, scale);
    return out;
  };
  step(false);
  const HostTensor out = step(true);

  // The reference: one softmax over keys 0..p with the query of each key's region.
  auto factor = [&](int64_t n) {
    if (c.dca.original_max_position_embeddings <= 0) return 1.0;
    const double orig = static_cast<double>(c.dca.original_max_position_embeddings);
    return std::max(1.0, 0.1 * std::log(static_cast<double>(n) / orig) + 1.0);
  };
  auto head = [&](int64_t s, int64_t p, int64_t col) {
    const std::vector<double>& r = raw[static_cast<size_t>(s)][static_cast<size_t>(p)];
    return std::vector<double>(r.begin() + col, r.begin() + col + D);
  };
  std::vector<double> ref;
  int regions_seen[3] = {0, 0, 0};
  for (int64_t s = 0; s < S; ++s) {
    const SeqCase& q = c.seqs[static_cast<size_t>(s)];
    const int64_t n = q.cached + q.fresh;
    // Keys and values of every position, per KV head: rotated at p mod L, times the writer's factor.
    std::vector<std::vector<std::vector<double>>> keys(static_cast<size_t>(n)), vals(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t h = 0; h < Hk; ++h) {
        std::vector<double> k = rotate(rms(head(s, j, (Hq + h) * D), c.norms ? &kw : nullptr, eps), j % L, inv_d);
        for (double& v : k) v *= factor(scale_len(s, j));
        keys[static_cast<size_t>(j)].push_back(k);
        vals[static_cast<size_t>(j)].push_back(head(s, j, (Hq + Hk + h) * D));
      }
    for (int64_t p = q.cached; p < n; ++p)
      for (int64_t g = 0; g < Hq; ++g) {
        const std::vector<double> qn_row = rms(head(s, p, g * D), c.norms ? &qw : nullptr, eps);
        const int64_t c_p = p / L;
        const int64_t succ_pos = std::min(p % L + L, c.dca.chunk_size);
        const int64_t inter_pos = std::min(2 * L - 1, c.dca.chunk_size);
        std::vector<double> qr[3] = {rotate(qn_row, p % L, inv_d), rotate(qn_row, succ_pos, inv_d),
                                     rotate(qn_row, inter_pos, inv_d)};
        for (auto& v : qr)
          for (double& e : v) e *= factor(scale_len(s, p));
        std::vector<double> logits(static_cast<size_t>(p + 1));
        for (int64_t j = 0; j <= p; ++j) {
          const int64_t c_j = j / L;
          const int r = c_j == c_p ? 0 : c_j == c_p - 1 ? 1 : 2;
          ++regions_seen[r];
          const std::vector<double>& k = keys[static_cast<size_t>(j)][static_cast<size_t>(g / G)];
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qr[r][static_cast<size_t>(d)] * k[static_cast<size_t>(d)];
          logits[static_cast<size_t>(j)] = dot * static_cast<double>(scale);
        }
        const double m = *std::max_element(logits.begin(), logits.end());
        double z = 0;
        for (double& l : logits) z += (l = std::exp(l - m));
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j <= p; ++j) {
            const std::vector<double>& v = vals[static_cast<size_t>(j)][static_cast<size_t>(g / G)];
            o += logits[static_cast<size_t>(j)] * v[static_cast<size_t>(d)];
          }
          ref.push_back(o / z);
        }
      }
  }
  SCOPED_TRACE(::testing::Message() << "L=" << L << " chunk_size=" << c.dca.chunk_size << " Hq=" << Hq << " Hk=" << Hk
                                    << " D=" << D << " BS=" << BS << " norms=" << c.norms
                                    << " dtype=" << dtype_name(c.dtype));
  // The batch reaches every region (the cases are built to), so the comparison covers all three.
  EXPECT_GT(regions_seen[0], 0);
  EXPECT_GT(regions_seen[1], 0);
  EXPECT_GT(regions_seen[2], 0);
  if (c.dtype == DType::kF32) {
    EXPECT_LT(test::max_abs_err(out, ref), 2e-5);
    EXPECT_LT(test::nmse(out, ref), 1e-10);
  } else {  // bf16 q, k, v and output: a few roundings of ~2^-9 relative each
    EXPECT_LT(test::max_abs_err(out, ref), 3e-2);
    EXPECT_LT(test::nmse(out, ref), 1e-4);
  }
}

// chunk_size 10, local_size 3 (L = 7): the successive rotation is clamped for p mod 7 > 3 (outside the local
// window), the inter rotation at 10. Sequences: a chunk crossing two chunk boundaries after a cached prefix
// (inter, successive and intra keys; boundaries at 14 and 21), a decode past the prompt (generated tokens'
// own lengths), a one-chunk prompt (intra only), a whole prompt from 0 over three chunks, and a decode whose
// position is the first of a chunk.
std::vector<SeqCase> mixed_batch() {
  return {{9, 14, 23}, {33, 1, 30}, {0, 5, 5}, {0, 16, 16}, {20, 1, 12}};
}

TEST(DualChunkAttention, MatchesFloat64ReferenceAcrossChunks) {
  uint32_t seed = 1;
  for (int64_t ratio : {1, 2, 4})
    for (bool norms : {false, true}) {
      const ops::DualChunkParams dca{.chunk_len = 7, .chunk_size = 10, .original_max_position_embeddings = 12};
      run({dca, mixed_batch(), 4, 4 / ratio, 16, 4, norms, DType::kF32}, seed++);
    }
}

TEST(DualChunkAttention, OddChunkAndBlockSizes) {
  uint32_t seed = 11;
  // L = 5 with blocks of 3 (chunks and blocks out of step), L = 16 with blocks of 16, L = 1 (every key its own
  // chunk), a local window as wide as the chunk allows, no length scaling.
  const ops::DualChunkParams cases[] = {{.chunk_len = 5, .chunk_size = 6, .original_max_position_embeddings = 4},
                                        {.chunk_len = 16, .chunk_size = 19, .original_max_position_embeddings = 0},
                                        {.chunk_len = 1, .chunk_size = 3, .original_max_position_embeddings = 0},
                                        {.chunk_len = 4, .chunk_size = 7, .original_max_position_embeddings = 40}};
  const int64_t block_sizes[] = {3, 16, 5, 1};
  for (int i = 0; i < 4; ++i) {
    std::vector<SeqCase> seqs = {{17, 19, 36}, {40, 1, 25}, {0, 9, 9}, {3, 2, 5}};
    if (cases[i].chunk_len == 16) seqs = {{17, 19, 36}, {40, 1, 25}, {0, 37, 37}};  // three chunks from position 0
    run({cases[i], seqs, 6, 2, 8, block_sizes[i], i % 2 == 0, DType::kF32}, seed++);
  }
}

TEST(DualChunkAttention, HalfPrecisionQueriesAndCache) {
  const ops::DualChunkParams dca{.chunk_len = 7, .chunk_size = 10, .original_max_position_embeddings = 12};
  run({dca, mixed_batch(), 8, 2, 32, 16, true, DType::kBF16}, 21);
}

// Within one chunk Dual Chunk Attention is plain attention: the prologue's intra query and key are
// qkv_prologue's, and the attention paged_attention's, bit for bit (no length factor below
// original_max_position_embeddings).
TEST(DualChunkAttention, WithinOneChunkEqualsPlainAttentionBitForBit) {
  std::mt19937 rng(5);
  const int64_t T = 20, Hq = 4, Hk = 2, D = 16, BS = 4, NB = 6, W = (Hq + 2 * Hk) * D;
  const ops::DualChunkParams dca{.chunk_len = 24, .chunk_size = 30, .original_max_position_embeddings = 24};
  HostTensor qkv = test::random_tensor(DType::kF32, {T, W}, rng);
  HostTensor inv(DType::kF32, {D / 2});
  for (int64_t i = 0; i < D / 2; ++i) inv.set(i, std::pow(1e4f, -2.0f * static_cast<float>(i) / D));
  std::vector<int32_t> pos(T), slots(T), lens(T, 20);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<int32_t> blocks = {3, 0, 5, 1, 4};
  for (int64_t t = 0; t < T; ++t) slots[t] = static_cast<int32_t>(blocks[t / BS] * BS + t % BS);
  HostTensor positions = test::i32_tensor(pos), slot_t = test::i32_tensor(slots), len_t = test::i32_tensor(lens);
  HostTensor cu = test::i32_tensor({0, static_cast<int32_t>(T)}), ctx = test::i32_tensor({static_cast<int32_t>(T)});
  HostTensor bt = test::i32_tensor(blocks, {1, 5});
  AttentionMetadata meta;
  meta.num_seqs = 1;
  meta.num_tokens = T;
  meta.max_query_len = T;
  meta.max_context_len = T;
  meta.cu_seqlens_q = cu.v;
  meta.context_lens = ctx.v;
  meta.block_tables = bt.v;
  meta.slot_mapping = slot_t.v;
  meta.block_size = BS;
  meta.dca_scale_lens = len_t.v;
  const ops::RopeParams rope{inv.v, 1.0f, false};
  const float scale = 0.25f;
  HostTensor kc1(DType::kF32, {NB, BS, Hk, D}), vc1(DType::kF32, {NB, BS, Hk, D});
  HostTensor kc2(DType::kF32, {NB, BS, Hk, D}), vc2(DType::kF32, {NB, BS, Hk, D});
  HostTensor q(DType::kF32, {T, Hq, D}), q3(DType::kF32, {3, T, Hq, D});
  HostTensor out1(DType::kF32, {T, Hq, D}), out2(DType::kF32, {T, Hq, D});
  ops::qkv_prologue(q.v, qkv.v, TensorView(), TensorView(), 1e-6f, positions.v, rope, kc1.v, vc1.v, meta);
  ops::paged_attention(out1.v, q.v, kc1.v, vc1.v, meta, scale);
  ops::dual_chunk_qkv_prologue(q3.v, qkv.v, TensorView(), TensorView(), 1e-6f, positions.v, rope, dca, kc2.v, vc2.v,
                               meta);
  ops::dual_chunk_attention(out2.v, q3.v, kc2.v, vc2.v, meta, dca, scale);
  EXPECT_EQ(kc1.bytes, kc2.bytes);
  EXPECT_EQ(vc1.bytes, vc2.bytes);
  EXPECT_TRUE(std::equal(q.bytes.begin(), q.bytes.end(), q3.bytes.begin()));  // q3[0] is the plain query
  EXPECT_EQ(out1.bytes, out2.bytes);
}

TEST(DualChunkAttention, BadArgumentsAreNamed) {
  HostTensor q3(DType::kF32, {2, 1, 2, 8}), out(DType::kF32, {1, 2, 8});
  HostTensor kc(DType::kF32, {1, 4, 1, 8}), vc(DType::kF32, {1, 4, 1, 8});
  HostTensor cu = test::i32_tensor({0, 1}), ctx = test::i32_tensor({1}), bt = test::i32_tensor({0}, {1, 1});
  HostTensor slots = test::i32_tensor({0});
  AttentionMetadata meta;
  meta.num_seqs = 1;
  meta.num_tokens = 1;
  meta.max_query_len = 1;
  meta.max_context_len = 1;
  meta.cu_seqlens_q = cu.v;
  meta.context_lens = ctx.v;
  meta.block_tables = bt.v;
  meta.slot_mapping = slots.v;
  meta.block_size = 4;
  const ops::DualChunkParams dca{.chunk_len = 4, .chunk_size = 6};
  using testing::expect_error;
  expect_error([&] { ops::dual_chunk_attention(out.v, q3.v, kc.v, vc.v, meta, dca, 1.0f); },
               {"dual_chunk_attention", "[3, T, Hq, D]"});
  HostTensor q(DType::kF32, {3, 1, 2, 8});
  auto attend = [&](const ops::DualChunkParams& d) { ops::dual_chunk_attention(out.v, q.v, kc.v, vc.v, meta, d, 1.0f); };
  expect_error([&] { attend({.chunk_len = 0, .chunk_size = 6}); }, {"dual_chunk_attention", "chunk_len"});
  expect_error([&] { attend({.chunk_len = 7, .chunk_size = 6}); },
               {"dual_chunk_attention", "chunk_size"});
  // Length scaling needs the lengths.
  HostTensor qkv(DType::kF32, {1, 4 * 8}), inv(DType::kF32, {4}), pos = test::i32_tensor({0});
  const ops::RopeParams rope{inv.v, 1.0f, false};
  const ops::DualChunkParams scaled{.chunk_len = 4, .chunk_size = 6, .original_max_position_embeddings = 8};
  expect_error([&] { ops::dual_chunk_qkv_prologue(q.v, qkv.v, {}, {}, 1e-6f, pos.v, rope, scaled, kc.v, vc.v, meta); },
               {"dual_chunk_qkv_prologue", "meta.dca_scale_lens"});
  HostTensor zero = test::i32_tensor({0});
  meta.dca_scale_lens = zero.v;
  expect_error([&] { ops::dual_chunk_qkv_prologue(q.v, qkv.v, {}, {}, 1e-6f, pos.v, rope, scaled, kc.v, vc.v, meta); },
               {"dual_chunk_qkv_prologue", "dca_scale_lens[0] = 0"});
  const ops::RopeParams glm{inv.v, 1.0f, true};
  expect_error([&] { ops::dual_chunk_qkv_prologue(q.v, qkv.v, {}, {}, 1e-6f, pos.v, glm, dca, kc.v, vc.v, meta); },
               {"dual_chunk_qkv_prologue", "interleaved"});
}

}  // namespace
}  // namespace nanovllm
