// The sparse policies' CUDA ops with Dual Chunk Attention (docs/sparse_attention.md, "With Dual Chunk Attention")
// against the CPU reference kernels (themselves checked against float64 references in
// tests/kernels/dual_chunk_sparse_test.cpp), on fresh random bf16 inputs with several chunks, so that keys of every
// region (intra, successive, inter) are attended:
// - block_sparse_prefill_attention: random patterns of key blocks and columns, chunks after a prefix starting
//   mid-block, pattern blocks of 64 / 128 (dividing the chunk), chunk lengths 128 / 256, GQA 1 / 4 / 7, head_dim 64 /
//   128; and the full pattern (dense DCA);
// - quest_scores: pages straddling chunk starts (chunk length 40, pages of 16) and aligned ones, GQA 1 / 4 / 7;
// - sparse_decode_attention: every page and random selections, contexts over 2-9 chunks, GQA 1 / 4 / 7, head_dim 64 /
//   128 / 256;
// - the four estimators: the full threshold gives the full pattern, and a planted hot key block that only the inter
//   rotation sees is listed while a decoy block only a wrongly applied intra rotation would see is not;
// - the engine (decode graphs on): the sparse prefill policies at their full thresholds and a covering Quest budget
//   give dense DCA's first tokens, resident and offloaded; at real sparsity the policies engage and the offloaded path
//   gives the resident one's first tokens. (The first 8 of 24: Quest's decode kernel sums in another order than the
//   dense one, and a tiny random model's greedy tokens may flip at a near-tie after that; the prefill patterns are
//   the same on both paths.)
// Tolerances as tests/cuda/test_cuda_attention.cpp: bf16 outputs of fp32 math, atol 1e-2 + rtol 5e-3 per element;
// Quest scores (fp32 sums in another order) 1e-3 relative.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "nanovllm/kernels/dual_chunk_ops.h"
#include "nanovllm/kernels/pattern_estimators.h"
#include "nanovllm/kernels/sparse_ops.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/sparse/sparse_prefill_attention.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::on;

constexpr float kAtol = 1e-2f, kRtol = 5e-3f;

// One sequence over a bf16 paged cache with shuffled blocks, its last T positions the chunk's rows; q3 [3, T, Hq, D].
struct DcaChunk {
  int64_t ctx, T, Hq, Hk, D, BS, NB;
  ops::DualChunkParams dca;
  std::vector<int32_t> bt, cu, ctx_v, slots;
  std::vector<uint16_t> q, k, v;
  DcaChunk(int64_t c, int64_t t, int64_t hq, int64_t hk, int64_t d, int64_t bs, int64_t L, std::mt19937& rng)
      : ctx(c),
        T(t),
        Hq(hq),
        Hk(hk),
        D(d),
        BS(bs),
        NB((c + bs - 1) / bs + 2),
        dca{.chunk_len = L, .chunk_size = L + 32} {
    bt.resize(static_cast<size_t>(NB));
    std::iota(bt.begin(), bt.end(), 0);
    std::shuffle(bt.begin(), bt.end(), rng);
    bt.resize(static_cast<size_t>((c + bs - 1) / bs));
    cu = {0, static_cast<int32_t>(t)};
    ctx_v = {static_cast<int32_t>(c)};
    for (int64_t p = c - t; p < c; ++p)
      slots.push_back(bt[static_cast<size_t>(p / bs)] * static_cast<int32_t>(bs) + static_cast<int32_t>(p % bs));
    q = cuda_test::random_bf16(static_cast<size_t>(3 * T * Hq * D), rng).bits;
    k = cuda_test::random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng, -2.0f, 2.0f).bits;
    v = cuda_test::random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng).bits;
  }
  Shape cache() const { return {NB, BS, Hk, D}; }
  Shape q_shape() const { return {3, T, Hq, D}; }
  Shape rows() const { return {T, Hq, D}; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(D)); }
  AttentionMetadata meta(TensorView cu_t, TensorView ctx_t, TensorView bt_t, TensorView slots_t) const {
    AttentionMetadata m;
    m.num_seqs = 1;
    m.num_tokens = m.max_query_len = T;
    m.max_context_len = ctx;
    m.cu_seqlens_q = cu_t;
    m.context_lens = ctx_t;
    m.block_tables = bt_t;
    m.slot_mapping = slots_t;
    m.block_size = BS;
    return m;
  }
};

// The chunk's tensors on the host (views of a copy) and on the device.
struct ChunkTensors {
  std::vector<int32_t> bt, cu, ctx, slots;
  std::vector<uint16_t> q, k, v;
  DeviceTensor d_q, d_k, d_v, d_bt, d_cu, d_ctx, d_slots;
  const DcaChunk& c;
  explicit ChunkTensors(const DcaChunk& chunk)
      : bt(chunk.bt),
        cu(chunk.cu),
        ctx(chunk.ctx_v),
        slots(chunk.slots),
        q(chunk.q),
        k(chunk.k),
        v(chunk.v),
        d_q(DType::kBF16, chunk.q_shape(), chunk.q),
        d_k(DType::kBF16, chunk.cache(), chunk.k),
        d_v(DType::kBF16, chunk.cache(), chunk.v),
        d_bt(DType::kI32, {1, static_cast<int64_t>(chunk.bt.size())}, chunk.bt),
        d_cu(DType::kI32, {2}, chunk.cu),
        d_ctx(DType::kI32, {1}, chunk.ctx_v),
        d_slots(DType::kI32, {chunk.T}, chunk.slots),
        c(chunk) {}
  AttentionMetadata host_meta() {
    return c.meta(cuda_test::host_view(cu, {2}), cuda_test::host_view(ctx, {1}),
                  cuda_test::host_view(bt, {1, static_cast<int64_t>(bt.size())}), cuda_test::host_view(slots, {c.T}));
  }
  AttentionMetadata device_meta() const { return c.meta(d_cu.view(), d_ctx.view(), d_bt.view(), d_slots.view()); }
  TensorView host_q() { return TensorView(q.data(), DType::kBF16, c.q_shape()); }
  TensorView host_k() { return TensorView(k.data(), DType::kBF16, c.cache()); }
  TensorView host_v() { return TensorView(v.data(), DType::kBF16, c.cache()); }
};

// A pattern's lists on the host and on the device ([Hk, NQB] counts, [Hk, NQB, width] lists).
struct PatternTensors {
  int64_t bs, Hk, NQB, MAXB, MAXC;
  std::vector<int32_t> bc, bi, cc, ci;
  std::unique_ptr<DeviceTensor> d_bc, d_bi, d_cc, d_ci;
  PatternTensors(int64_t block_size, int64_t hk, int64_t ctx, int64_t max_columns)
      : bs(block_size), Hk(hk), NQB((ctx + block_size - 1) / block_size), MAXB(NQB), MAXC(max_columns) {
    bc.assign(static_cast<size_t>(Hk * NQB), 0);
    bi.assign(static_cast<size_t>(Hk * NQB * MAXB), -1);
    if (MAXC > 0) {
      cc.assign(static_cast<size_t>(Hk * NQB), 0);
      ci.assign(static_cast<size_t>(Hk * NQB * MAXC), -1);
    }
  }
  void set_row(int64_t h, int64_t i, const std::vector<int32_t>& blocks, const std::vector<int32_t>& cols) {
    bc[static_cast<size_t>(h * NQB + i)] = static_cast<int32_t>(blocks.size());
    std::copy(blocks.begin(), blocks.end(), bi.begin() + (h * NQB + i) * MAXB);
    if (MAXC == 0) return;
    cc[static_cast<size_t>(h * NQB + i)] = static_cast<int32_t>(cols.size());
    std::copy(cols.begin(), cols.end(), ci.begin() + (h * NQB + i) * MAXC);
  }
  void upload() {
    d_bc = std::make_unique<DeviceTensor>(DType::kI32, Shape{Hk, NQB}, bc);
    d_bi = std::make_unique<DeviceTensor>(DType::kI32, Shape{Hk, NQB, MAXB}, bi);
    if (MAXC > 0) {
      d_cc = std::make_unique<DeviceTensor>(DType::kI32, Shape{Hk, NQB}, cc);
      d_ci = std::make_unique<DeviceTensor>(DType::kI32, Shape{Hk, NQB, MAXC}, ci);
    }
  }
  void download() {
    bc = d_bc->download<int32_t>();
    bi = d_bi->download<int32_t>();
    if (MAXC > 0) {
      cc = d_cc->download<int32_t>();
      ci = d_ci->download<int32_t>();
    }
  }
  ops::BlockSparsePattern host() {
    ops::BlockSparsePattern p;
    p.block_size = bs;
    p.block_counts = cuda_test::host_view(bc, {Hk, NQB});
    p.block_index = cuda_test::host_view(bi, {Hk, NQB, MAXB});
    if (MAXC > 0) {
      p.column_counts = cuda_test::host_view(cc, {Hk, NQB});
      p.column_index = cuda_test::host_view(ci, {Hk, NQB, MAXC});
    }
    return p;
  }
  ops::BlockSparsePattern device() const {
    ops::BlockSparsePattern p;
    p.block_size = bs;
    p.block_counts = d_bc->view();
    p.block_index = d_bi->view();
    if (MAXC > 0) {
      p.column_counts = d_cc->view();
      p.column_index = d_ci->view();
    }
    return p;
  }
  bool covers(int64_t h, int64_t i, int64_t pos) const {
    const auto row = static_cast<size_t>(h * NQB + i);
    for (int32_t j = 0; j < bc[row]; ++j)
      if (bi[row * static_cast<size_t>(MAXB) + static_cast<size_t>(j)] == pos / bs) return true;
    for (int32_t j = 0; MAXC > 0 && j < cc[row]; ++j)
      if (ci[row * static_cast<size_t>(MAXC) + static_cast<size_t>(j)] == pos) return true;
    return false;
  }
};

struct BlockCase {
  int64_t ctx, T, Hq, Hk, D, cache_bs, bs, L;
  double p_other, p_col;  // p_other < 0: the full causal pattern
};

TEST(CudaDualChunkSparse, BlockSparsePrefillMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  const BlockCase cases[] = {
      {.ctx = 700,
       .T = 333,
       .Hq = 4,
       .Hk = 1,
       .D = 128,
       .cache_bs = 16,
       .bs = 64,
       .L = 128,
       .p_other = 0.4,
       .p_col = 0.05},
      {.ctx = 1100,
       .T = 517,
       .Hq = 7,
       .Hk = 1,
       .D = 128,
       .cache_bs = 32,
       .bs = 128,
       .L = 256,
       .p_other = 0.5,
       .p_col = 0.02},
      {.ctx = 613,
       .T = 613,
       .Hq = 2,
       .Hk = 2,
       .D = 64,
       .cache_bs = 16,
       .bs = 64,
       .L = 128,
       .p_other = 0.3,
       .p_col = 0.1},
      {.ctx = 901,
       .T = 130,
       .Hq = 8,
       .Hk = 2,
       .D = 64,
       .cache_bs = 256,
       .bs = 128,
       .L = 128,
       .p_other = 0.6,
       .p_col = 0},
      {.ctx = 777, .T = 200, .Hq = 4, .Hk = 1, .D = 128, .cache_bs = 16, .bs = 64, .L = 128, .p_other = -1, .p_col = 0},
  };
  uint32_t seed = 100;
  for (const BlockCase& k : cases) {
    std::mt19937 rng(seed++);
    const DcaChunk c(k.ctx, k.T, k.Hq, k.Hk, k.D, k.cache_bs, k.L, rng);
    ChunkTensors t(c);
    PatternTensors pt(k.bs, k.Hk, k.ctx, k.p_col > 0 ? k.ctx : 0);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int64_t h = 0; h < k.Hk; ++h)
      for (int64_t i = 0; i < pt.NQB; ++i) {
        std::vector<int32_t> blocks, cols;
        for (int32_t j = 0; j <= i; ++j)
          if (k.p_other < 0 || j == i || j == 0 || u(rng) < k.p_other) blocks.push_back(j);
        for (int32_t p = 0; k.p_col > 0 && p < std::min<int64_t>((i + 1) * k.bs, k.ctx); ++p)
          if (!std::binary_search(blocks.begin(), blocks.end(), p / static_cast<int32_t>(k.bs)) && u(rng) < k.p_col)
            cols.push_back(p);
        pt.set_row(h, i, blocks, cols);
      }
    pt.upload();
    std::vector<float> ref(static_cast<size_t>(c.T * c.Hq * c.D));
    ops::block_sparse_prefill_attention(cuda_test::host_view(ref, c.rows()), t.host_q(), t.host_k(), t.host_v(),
                                        t.host_meta(), pt.host(), c.scale(), &c.dca);
    DeviceTensor out(DType::kBF16, c.rows());
    out.fill_bytes(0xff);  // NaN
    ops::block_sparse_prefill_attention(out.view(), t.d_q.view(), t.d_k.view(), t.d_v.view(), t.device_meta(),
                                        pt.device(), c.scale(), &c.dca, on());
    cuda_test::expect_close(out.download_f32(), ref, kAtol, kRtol,
                            "ctx " + std::to_string(k.ctx) + " T " + std::to_string(k.T) + " L " + std::to_string(k.L));
    if (k.p_other < 0) {  // the full pattern: dense DCA on the GPU too
      std::vector<float> dense(ref.size());
      DeviceTensor d_dense(DType::kBF16, c.rows());
      ops::dual_chunk_attention(d_dense.view(), t.d_q.view(), t.d_k.view(), t.d_v.view(), t.device_meta(), c.dca,
                                c.scale(), on());
      cuda_test::expect_close(out.download_f32(), d_dense.download_f32(), kAtol, kRtol, "full pattern vs dense DCA");
    }
  }
}

// A decode batch over a bf16 cache: q3 [3, S, Hq, D], pages = cache blocks.
struct DcaDecode {
  int64_t S, Hq, Hk, D, BS, NB = 0, MB = 0;
  ops::DualChunkParams dca;
  std::vector<int32_t> ctx, bt, cu, slots;
  std::vector<uint16_t> q, k, v;
  DcaDecode(std::vector<int32_t> context, int64_t hq, int64_t hk, int64_t d, int64_t bs, int64_t L, std::mt19937& rng)
      : S(static_cast<int64_t>(context.size())),
        Hq(hq),
        Hk(hk),
        D(d),
        BS(bs),
        dca{.chunk_len = L, .chunk_size = L + 16},
        ctx(std::move(context)) {
    for (int32_t c : ctx) {
      NB += (c + BS - 1) / BS;
      MB = std::max<int64_t>(MB, (c + BS - 1) / BS);
    }
    NB += 2;
    std::vector<int32_t> ids(static_cast<size_t>(NB));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    bt.assign(static_cast<size_t>(S * MB), -1);
    size_t next = 0;
    cu = {0};
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t p = 0; p < pages(s); ++p) bt[static_cast<size_t>(s * MB + p)] = ids[next++];
      cu.push_back(static_cast<int32_t>(s + 1));
      const int64_t last = ctx[static_cast<size_t>(s)] - 1;
      slots.push_back(bt[static_cast<size_t>(s * MB + last / BS)] * static_cast<int32_t>(BS) +
                      static_cast<int32_t>(last % BS));
    }
    q = cuda_test::random_bf16(static_cast<size_t>(3 * S * Hq * D), rng).bits;
    k = cuda_test::random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng, -2.0f, 2.0f).bits;
    v = cuda_test::random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng).bits;
  }
  int64_t pages(int64_t s) const { return (ctx[static_cast<size_t>(s)] + BS - 1) / BS; }
  Shape cache() const { return {NB, BS, Hk, D}; }
};

TEST(CudaDualChunkSparse, QuestScoresMatchTheCpu) {
  SKIP_WITHOUT_CUDA();
  struct QCase {
    std::vector<int32_t> ctx;
    int64_t Hq, Hk, D, BS, L;
  };
  const QCase cases[] = {{{300, 41, 517, 129}, 4, 1, 128, 16, 40},
                         {{1000, 260, 700}, 7, 1, 128, 16, 128},
                         {{333, 90}, 2, 2, 64, 32, 48},
                         {{800, 17}, 8, 2, 256, 16, 256}};
  uint32_t seed = 200;
  for (const QCase& qc : cases) {
    std::mt19937 rng(seed++);
    DcaDecode b(qc.ctx, qc.Hq, qc.Hk, qc.D, qc.BS, qc.L, rng);
    // Page min / max from the cache on the host (the CPU op), shared by both.
    std::vector<int32_t> all;
    for (int64_t s = 0; s < b.S; ++s)
      for (int64_t p = 0; p < b.ctx[static_cast<size_t>(s)]; ++p)
        all.push_back(b.bt[static_cast<size_t>(s * b.MB + p / b.BS)] * static_cast<int32_t>(b.BS) +
                      static_cast<int32_t>(p % b.BS));
    std::vector<uint16_t> kmin(static_cast<size_t>(b.NB * b.Hk * b.D)), kmax(kmin.size());
    ops::quest_update_pages(TensorView(kmin.data(), DType::kBF16, {b.NB, b.Hk, b.D}),
                            TensorView(kmax.data(), DType::kBF16, {b.NB, b.Hk, b.D}),
                            TensorView(b.k.data(), DType::kBF16, b.cache()),
                            cuda_test::host_view(all, {static_cast<int64_t>(all.size())}));
    const int64_t MP = b.MB + 3;
    std::vector<float> ref(static_cast<size_t>(b.S * b.Hk * MP));
    ops::quest_scores(cuda_test::host_view(ref, {b.S, b.Hk, MP}),
                      TensorView(b.q.data(), DType::kBF16, {3, b.S, b.Hq, b.D}),
                      TensorView(kmin.data(), DType::kBF16, {b.NB, b.Hk, b.D}),
                      TensorView(kmax.data(), DType::kBF16, {b.NB, b.Hk, b.D}), cuda_test::host_view(b.bt, {b.S, b.MB}),
                      cuda_test::host_view(b.ctx, {b.S}), b.BS, &b.dca);
    DeviceTensor d_q(DType::kBF16, {3, b.S, b.Hq, b.D}, b.q), d_min(DType::kBF16, {b.NB, b.Hk, b.D}, kmin),
        d_max(DType::kBF16, {b.NB, b.Hk, b.D}, kmax), d_bt(DType::kI32, {b.S, b.MB}, b.bt),
        d_ctx(DType::kI32, {b.S}, b.ctx), d_scores(DType::kF32, {b.S, b.Hk, MP});
    ops::quest_scores(d_scores.view(), d_q.view(), d_min.view(), d_max.view(), d_bt.view(), d_ctx.view(), b.BS, &b.dca,
                      on());
    const std::vector<float> got = d_scores.download<float>();
    for (size_t i = 0; i < ref.size(); ++i) {
      if (std::isinf(ref[i])) {
        EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << i;
        continue;
      }
      ASSERT_NEAR(got[i], ref[i], 1e-3f * std::max(1.0f, std::fabs(ref[i]))) << "score " << i << ", L " << qc.L;
    }
  }
}

TEST(CudaDualChunkSparse, SparseDecodeMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  struct DCase {
    std::vector<int32_t> ctx;
    int64_t Hq, Hk, D, BS, L;
  };
  const DCase cases[] = {{{1000, 129, 517, 260}, 7, 1, 128, 16, 128},
                         {{700, 300}, 4, 1, 64, 32, 128},
                         {{1200, 33}, 8, 2, 256, 16, 256},
                         {{2305}, 1, 1, 128, 16, 256}};
  uint32_t seed = 300;
  for (const DCase& dc : cases) {
    std::mt19937 rng(seed++);
    DcaDecode b(dc.ctx, dc.Hq, dc.Hk, dc.D, dc.BS, dc.L, rng);
    const int64_t K = b.MB;
    for (bool every : {true, false}) {
      std::vector<int32_t> sel(static_cast<size_t>(b.S * b.Hk * K), -1);
      std::bernoulli_distribution keep(0.3);
      for (int64_t s = 0; s < b.S; ++s)
        for (int64_t h = 0; h < b.Hk; ++h) {
          int32_t n = 0;
          for (int32_t p = 0; p < b.pages(s); ++p)
            if (every || p == 0 || p == b.pages(s) - 1 || keep(rng))
              sel[static_cast<size_t>((s * b.Hk + h) * K + n++)] = p;
        }
      const float scale = 1.0f / std::sqrt(static_cast<float>(b.D));
      std::vector<float> ref(static_cast<size_t>(b.S * b.Hq * b.D));
      std::vector<int32_t> scratch(static_cast<size_t>(ops::sparse_decode_scratch_ints(b.S, b.Hk, K, b.BS)));
      ops::sparse_decode_attention(
          cuda_test::host_view(ref, {b.S, b.Hq, b.D}), TensorView(b.q.data(), DType::kBF16, {3, b.S, b.Hq, b.D}),
          TensorView(b.k.data(), DType::kBF16, b.cache()), TensorView(b.v.data(), DType::kBF16, b.cache()),
          cuda_test::host_view(b.bt, {b.S, b.MB}), cuda_test::host_view(b.ctx, {b.S}),
          cuda_test::host_view(sel, {b.S, b.Hk, K}), scale,
          cuda_test::host_view(scratch, {static_cast<int64_t>(scratch.size())}), &b.dca);
      DeviceTensor d_q(DType::kBF16, {3, b.S, b.Hq, b.D}, b.q), d_k(DType::kBF16, b.cache(), b.k),
          d_v(DType::kBF16, b.cache(), b.v), d_bt(DType::kI32, {b.S, b.MB}, b.bt), d_ctx(DType::kI32, {b.S}, b.ctx),
          d_sel(DType::kI32, {b.S, b.Hk, K}, sel), d_out(DType::kBF16, {b.S, b.Hq, b.D}),
          d_scratch(DType::kI32, {static_cast<int64_t>(scratch.size())});
      d_out.fill_bytes(0xff);
      ops::sparse_decode_attention(d_out.view(), d_q.view(), d_k.view(), d_v.view(), d_bt.view(), d_ctx.view(),
                                   d_sel.view(), scale, d_scratch.view(), &b.dca, on());
      cuda_test::expect_close(d_out.download_f32(), ref, kAtol, kRtol,
                              std::string(every ? "every page" : "a selection") + ", D " + std::to_string(b.D));
    }
  }
}

// ctx = 4 chunks of 128 (pattern blocks of 64), the last chunk the queries: a hot block in chunk 0 only the inter
// rotation sees, a decoy in chunk 1 (inter too) only the intra / successive rotations would see (the CPU twin:
// DualChunkSparse.EstimatorsScoreEachKeyWithItsRegionsRotation). And every estimator's full threshold: the full
// pattern.
TEST(CudaDualChunkSparse, EstimatorsScoreEachKeyWithItsRegionsRotation) {
  SKIP_WITHOUT_CUDA();
  constexpr int64_t L = 128, B = 64, kHot = 1, kDecoy = 3, Hq = 2, Hk = 1, D = 64;
  std::mt19937 rng(7);
  DcaChunk c(4 * L, L, Hq, Hk, D, 16, L, rng);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  for (auto& x : c.k) x = f32_to_bf16(noise(rng));
  for (auto& x : c.q) x = f32_to_bf16(noise(rng));
  const auto set_k = [&](int64_t p, int64_t d, float x) {
    const int64_t slot = int64_t{c.bt[static_cast<size_t>(p / c.BS)]} * c.BS + p % c.BS;
    c.k[static_cast<size_t>(slot * Hk * D + d)] = f32_to_bf16(x);
  };
  for (int64_t p = kHot * B; p < (kHot + 1) * B; ++p) set_k(p, 0, 8.0f);
  for (int64_t p = kDecoy * B; p < (kDecoy + 1) * B; ++p) set_k(p, 1, 8.0f);
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t g = 0; g < Hq; ++g) {
      c.q[static_cast<size_t>(((2 * c.T + t) * Hq + g) * D + 0)] = f32_to_bf16(8.0f);  // inter
      c.q[static_cast<size_t>(((0 * c.T + t) * Hq + g) * D + 1)] = f32_to_bf16(8.0f);  // intra
      c.q[static_cast<size_t>(((1 * c.T + t) * Hq + g) * D + 1)] = f32_to_bf16(8.0f);  // successive
    }
  ChunkTensors t(c);
  const char* names[] = {"xattention", "minference", "flexprefill", "avgpool"};
  for (bool full : {false, true})
    for (int e = 0; e < 4; ++e) {
      SCOPED_TRACE(std::string(names[e]) + (full ? ", full threshold" : ""));
      PatternTensors pt(B, Hk, c.ctx, e == 1 ? Hq * (B + 1) : 0);
      pt.upload();
      const AttentionMetadata m = t.device_meta();
      const double th = full ? 1.0 : 0.9;
      switch (e) {
        case 0:
          ops::xattention_estimate(pt.device(), t.d_q.view(), t.d_k.view(), m, c.scale(),
                                   {.stride = 8, .threshold = th}, &c.dca, on());
          break;
        case 1:
          ops::vertical_slash_estimate(pt.device(), t.d_q.view(), t.d_k.view(), m, c.scale(),
                                       full ? ops::VerticalSlashParams{.last_q = 64, .vertical = 0, .slash = c.ctx}
                                            : ops::VerticalSlashParams{.last_q = 64,
                                                                       .vertical = B + 1,
                                                                       .slash = 4,
                                                                       .sink_tokens = 1,
                                                                       .recent_diagonals = 1},
                                       &c.dca, on());
          break;
        case 2:
          ops::flexprefill_estimate(pt.device(), t.d_q.view(), t.d_k.view(), m, c.scale(),
                                    {.gamma = th, .min_budget = B}, &c.dca, on());
          break;
        case 3:
          ops::avgpool_estimate(pt.device(), t.d_q.view(), t.d_k.view(), m, c.scale(), {.threshold = th}, &c.dca, on());
          break;
      }
      pt.download();
      for (int64_t i = (c.ctx - c.T) / B; i < pt.NQB; ++i) {
        if (full) {
          for (int64_t j = 0; j <= i; ++j) EXPECT_TRUE(pt.covers(0, i, j * B)) << "block " << j << " of row " << i;
          continue;
        }
        for (int64_t p = kHot * B; p < (kHot + 1) * B; ++p) EXPECT_TRUE(pt.covers(0, i, p)) << "hot key " << p;
        for (int64_t p = kDecoy * B; p < (kDecoy + 1) * B; ++p) EXPECT_FALSE(pt.covers(0, i, p)) << "decoy key " << p;
      }
    }
}

// The engine on a tiny DCA model (chunks of 128 positions; contexts to 4 chunks).
EngineConfig dca_engine() {
  EngineConfig ec;
  ec.model.path = testing::preset_model_dir(
      "dca-tiny", "cuda-sparse",
      {{"head_dim", 64},
       {"num_key_value_heads", 1},
       {"dual_chunk_attention_config",
        {{"chunk_size", 160}, {"local_size", 32}, {"original_max_position_embeddings", 200}}}},
      62);
  ec.model.backend = Backend::kCuda;
  ec.model.max_model_len = 1024;
  ec.cache.block_size = 16;
  ec.cache.num_kv_blocks = 256;
  ec.cache.enable_prefix_caching = false;
  ec.scheduler.max_num_batched_tokens = 2048;  // every prompt whole in the first step, as on the offload path
  return ec;
}

EngineConfig with_sparse(EngineConfig ec, SparsePrefillPolicy policy, bool covering) {
  ec.sparse_prefill.policy = policy;
  ec.sparse_prefill.block_size = 64;
  ec.sparse_prefill.min_tokens = 128;
  ec.sparse_prefill.last_q = 64;
  ec.sparse_prefill.min_budget = 64;
  ec.sparse_prefill.count_blocks = true;
  ec.sparse.policy = "quest";
  if (covering) {
    ec.sparse_prefill.threshold = 1.0;
    ec.sparse_prefill.slash = 100000;
    ec.sparse.budget_tokens = 1024;
  } else {
    // Random weights spread attention evenly, so the default thresholds keep every block of these short prompts: a
    // low threshold (and for xattention and avgpool a key budget of 3 blocks) makes each policy select; minference
    // keeps its adaptive default, which already does.
    if (policy != SparsePrefillPolicy::kMInference) ec.sparse_prefill.threshold = 0.5;
    if (policy == SparsePrefillPolicy::kXAttention || policy == SparsePrefillPolicy::kAvgPool) {
      ec.sparse_prefill.budget_tokens = 192;
    }
    ec.sparse.budget_tokens = 128;
  }
  return ec;
}

EngineConfig offloaded(EngineConfig ec) {
  ec.offload.enabled = true;
  ec.offload.min_tokens = 1;
  ec.offload.block_size = 16;
  ec.offload.max_num_seqs = 2;
  return ec;
}

TEST(CudaDualChunkSparse, EngineSparsePoliciesWithDca) {
  SKIP_WITHOUT_CUDA();
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {300, 520, 450}) {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back((i * 7919 + n * 31) % 512);
    prompts.push_back(p);
  }
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = 24;
  const auto tokens = [&](const EngineConfig& ec) {
    std::vector<std::vector<int32_t>> out;
    for (const auto& o : LLM(ec).generate(prompts, sp)) out.push_back(o.token_ids);
    return out;
  };
  const auto expect_first = [&](const std::vector<std::vector<int32_t>>& got,
                                const std::vector<std::vector<int32_t>>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size()) << what;
      EXPECT_TRUE(std::equal(got[i].begin(), got[i].begin() + 8, want[i].begin())) << what << ", prompt " << i;
    }
  };
  const auto dense = tokens(dca_engine());
  const auto dense_off = tokens(offloaded(dca_engine()));
  for (SparsePrefillPolicy policy : {SparsePrefillPolicy::kXAttention, SparsePrefillPolicy::kMInference,
                                     SparsePrefillPolicy::kFlexPrefill, SparsePrefillPolicy::kAvgPool}) {
    SCOPED_TRACE(sparse_prefill_policy_name(policy));
    expect_first(tokens(with_sparse(dca_engine(), policy, true)), dense, "covering, resident");
    expect_first(tokens(offloaded(with_sparse(dca_engine(), policy, true))), dense_off, "covering, offloaded");
    LLM resident(with_sparse(dca_engine(), policy, false));
    std::vector<std::vector<int32_t>> a;
    for (const auto& o : resident.generate(prompts, sp)) a.push_back(o.token_ids);
    const RunnerStats stats = resident.engine().runner_stats();
    ASSERT_TRUE(stats.sparse_prefill.has_value());
    EXPECT_GT(stats.sparse_prefill->sparse_layer_chunks, 0);
    EXPECT_LT(stats.sparse_prefill->attended_blocks, stats.sparse_prefill->causal_blocks);
    expect_first(tokens(offloaded(with_sparse(dca_engine(), policy, false))), a, "sparse: offloaded vs resident");
  }
}

}  // namespace
}  // namespace nanovllm
