// The CUDA sparse decode ops against their CPU references on the same bf16 data: Quest metadata bit for
// bit (after a prefill and decode steps), scores within fp32-sum tolerance, page selection identical on
// the same scores (ties included, contexts past one scan chunk), and attention over selected pages within
// bf16 tolerance (tensor-core head_dim 64 / 128, GQA groups 1 to 8, odd block sizes, partial pages).
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "nanovllm/kernels/sparse_ops.h"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::on;

// A decode batch over a bf16 paged cache with shuffled blocks (host copies for the references).
struct Batch {
  int64_t S, Hq, Hk, D, BS, NB = 0, MB = 0;
  std::vector<int32_t> ctx, bt;
  cuda_test::Bf16Data q, k, v;
  Batch(std::vector<int32_t> c, int64_t hq, int64_t hk, int64_t d, int64_t bs, std::mt19937& rng)
      : S(static_cast<int64_t>(c.size())), Hq(hq), Hk(hk), D(d), BS(bs), ctx(std::move(c)) {
    for (int32_t x : ctx) {
      NB += (x + BS - 1) / BS;
      MB = std::max(MB, (x + BS - 1) / BS);
    }
    NB += 3;
    std::vector<int32_t> ids(static_cast<size_t>(NB));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    bt.assign(static_cast<size_t>(S * MB), -1);
    size_t next = 0;
    for (int64_t s = 0; s < S; ++s)
      for (int64_t p = 0; p < pages(s); ++p) bt[static_cast<size_t>(s * MB + p)] = ids[next++];
    q = cuda_test::random_bf16(static_cast<size_t>(S * Hq * D), rng);
    k = cuda_test::random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng, -2.0f, 2.0f);
    v = cuda_test::random_bf16(static_cast<size_t>(NB * BS * Hk * D), rng);
  }
  int64_t pages(int64_t s) const { return (ctx[static_cast<size_t>(s)] + BS - 1) / BS; }
  Shape cache_shape() const { return {NB, BS, Hk, D}; }
  TensorView host(std::vector<uint16_t>& bits, Shape shape) const {
    return TensorView(bits.data(), DType::kBF16, shape);
  }
};

void check_quest_metadata_and_scores(int64_t d, int64_t hq, int64_t hk) {
  std::mt19937 rng(static_cast<uint32_t>(d + hk));
  Batch b({150, 7, 33, 64, 4805}, hq, hk, d, 16, rng);  // 4805: 301 pages, past one score CTA's pages
  // Step 1: every position but the last two of each sequence, one -1 slot; steps 2 and 3: one token each.
  std::vector<std::vector<int32_t>> steps(3);
  for (int64_t s = 0; s < b.S; ++s) {
    const int64_t c = b.ctx[static_cast<size_t>(s)];
    for (int64_t pos = 0; pos < c; ++pos) {
      const int32_t slot = b.bt[static_cast<size_t>(s * b.MB + pos / b.BS)] * static_cast<int32_t>(b.BS) +
                           static_cast<int32_t>(pos % b.BS);
      steps[pos < c - 2 ? 0 : static_cast<size_t>(pos - (c - 2) + 1)].push_back(slot);
    }
  }
  steps[0].insert(steps[0].begin() + 3, -1);
  const Shape meta_shape{b.NB, b.Hk, b.D};
  std::vector<uint16_t> cpu_min(static_cast<size_t>(meta_shape.numel()), 0), cpu_max(cpu_min);
  DeviceTensor k_cache(DType::kBF16, b.cache_shape(), b.k.bits);
  DeviceTensor k_min(DType::kBF16, meta_shape), k_max(DType::kBF16, meta_shape);
  k_min.fill_bytes(0);
  k_max.fill_bytes(0);
  for (auto& step : steps) {
    const int64_t T = static_cast<int64_t>(step.size());
    ops::quest_update_pages(b.host(cpu_min, meta_shape), b.host(cpu_max, meta_shape), b.host(b.k.bits, b.cache_shape()),
                            cuda_test::host_view(step, {T}));
    DeviceTensor slots(DType::kI32, {T}, step);
    ops::quest_update_pages(k_min.view(), k_max.view(), k_cache.view(), slots.view(), on());
  }
  // Only blocks some sequence owns are defined; compare those.
  const std::vector<uint16_t> got_min = k_min.download<uint16_t>(), got_max = k_max.download<uint16_t>();
  int64_t compared = 0;
  for (int64_t s = 0; s < b.S; ++s)
    for (int64_t p = 0; p < b.pages(s); ++p)
      for (int64_t e = 0; e < b.Hk * b.D; ++e) {
        const size_t i = static_cast<size_t>(b.bt[static_cast<size_t>(s * b.MB + p)] * b.Hk * b.D + e);
        ASSERT_EQ(got_min[i], cpu_min[i]) << "seq " << s << " page " << p;
        ASSERT_EQ(got_max[i], cpu_max[i]) << "seq " << s << " page " << p;
        ++compared;
      }
  EXPECT_GT(compared, 0);

  // Scores from that metadata: within fp32 summation error of the CPU's double sums.
  const int64_t MP = b.MB + 3;
  std::vector<float> cpu_scores(static_cast<size_t>(b.S * b.Hk * MP));
  DeviceTensor q(DType::kBF16, {b.S, b.Hq, b.D}, b.q.bits), bt(DType::kI32, {b.S, b.MB}, b.bt),
      ctx(DType::kI32, {b.S}, b.ctx), scores(DType::kF32, {b.S, b.Hk, MP});
  ops::quest_scores(cuda_test::host_view(cpu_scores, {b.S, b.Hk, MP}), b.host(b.q.bits, {b.S, b.Hq, b.D}),
                    b.host(cpu_min, meta_shape), b.host(cpu_max, meta_shape), cuda_test::host_view(b.bt, {b.S, b.MB}),
                    cuda_test::host_view(b.ctx, {b.S}), b.BS);
  ops::quest_scores(scores.view(), q.view(), k_min.view(), k_max.view(), bt.view(), ctx.view(), b.BS, on());
  const std::vector<float> got = scores.download<float>();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(cpu_scores[i])) {
      EXPECT_EQ(got[i], cpu_scores[i]) << i;
    } else {
      EXPECT_NEAR(got[i], cpu_scores[i], 1e-4f * (1.0f + std::fabs(cpu_scores[i]))) << i;
    }
  }
}

// head_dim 64 / 128 / 256 with GQA groups of up to 8 take the tensor-core score kernel (groups of 4, 2, 8 and 1),
// a group of 16 the vectorised CUDA-core one, head_dim 40 the generic one; the Qwen3-4B heads (32 / 8) and an odd
// KV head count.
TEST(CudaSparse, QuestMetadataAndScoresMatchTheCpu) {
  SKIP_WITHOUT_CUDA();
  const int64_t shapes[][3] = {{128, 8, 2}, {64, 8, 2}, {256, 8, 2}, {40, 8, 2}, {128, 32, 8},
                               {128, 6, 3}, {128, 16, 2}, {64, 3, 3}, {128, 32, 2}};
  for (const auto& [d, hq, hk] : shapes) {
    SCOPED_TRACE("head_dim " + std::to_string(d) + ", heads " + std::to_string(hq) + " / " + std::to_string(hk));
    check_quest_metadata_and_scores(d, hq, hk);
  }
}

// `copies` repetitions of five sequences (short, exactly the budget, one past it, long with ties, all equal):
// 15 (sequence, KV head) items take the few-items kernel (1024 threads), 120 the batch one (256). The long
// sequence has `mp` pages (a 128K context has 8192 of 16 tokens).
void check_select(int64_t copies, int64_t mp = 3000) {
  SCOPED_TRACE("copies " + std::to_string(copies) + ", pages " + std::to_string(mp));
  std::mt19937 rng(2);
  const int64_t S = 5 * copies, Hk = 3, BS = 16, MP = mp, K = 130, sink = 1, recent = 2;
  std::vector<int32_t> ctx;
  for (int64_t c = 0; c < copies; ++c)
    ctx.insert(ctx.end(), {40, 130 * 16, 130 * 16 + 1, static_cast<int32_t>(mp * 16), 1234 * 16 - 5});
  std::vector<float> sc(static_cast<size_t>(S * Hk * MP));
  std::uniform_real_distribution<float> u(-5.0f, 5.0f);
  for (float& x : sc) x = u(rng);
  for (int64_t c = 0; c < copies; ++c) {
    const int64_t base = 5 * c * Hk * MP;
    for (int64_t i = 0; i < 400; ++i) sc[static_cast<size_t>(base + 3 * Hk * MP + 100 + i)] = 1.25f;  // ties
    for (int64_t i = 0; i < MP; ++i) sc[static_cast<size_t>(base + 4 * Hk * MP + MP + i)] = -0.0f;     // all equal
  }
  std::vector<int32_t> cpu_sel(static_cast<size_t>(S * Hk * K));
  ops::select_pages(cuda_test::host_view(cpu_sel, {S, Hk, K}), cuda_test::host_view(sc, {S, Hk, MP}),
                    cuda_test::host_view(ctx, {S}), BS, sink, recent);
  DeviceTensor scores(DType::kF32, {S, Hk, MP}, sc), context(DType::kI32, {S}, ctx), sel(DType::kI32, {S, Hk, K});
  sel.fill_bytes(0x7f);
  ops::select_pages(sel.view(), scores.view(), context.view(), BS, sink, recent, on());
  EXPECT_EQ(sel.download<int32_t>(), cpu_sel);
}

TEST(CudaSparse, SelectPagesMatchesTheCpuOnTheSameScores) {
  SKIP_WITHOUT_CUDA();
  check_select(1);
  check_select(8);
  check_select(1, 8195);  // 8192 middle pages (sink 1, recent 2): a 128K context in pages of 16
}

void check_attention(int64_t hq, int64_t hk, int64_t d, int64_t bs, uint32_t seed) {
  std::mt19937 rng(seed);
  Batch b({1, 45, 300, 1000}, hq, hk, d, bs, rng);
  const int64_t K = 12;
  // Per (seq, head): random pages in increasing order, always the last one (as every policy keeps it).
  std::vector<int32_t> sel(static_cast<size_t>(b.S * b.Hk * K), -1);
  for (int64_t s = 0; s < b.S; ++s)
    for (int64_t h = 0; h < b.Hk; ++h) {
      std::vector<int32_t> pages(static_cast<size_t>(b.pages(s) - 1));
      std::iota(pages.begin(), pages.end(), 0);
      std::shuffle(pages.begin(), pages.end(), rng);
      pages.resize(std::min<size_t>(pages.size(), static_cast<size_t>(K - 1 - h % 2)));
      pages.push_back(static_cast<int32_t>(b.pages(s) - 1));
      std::sort(pages.begin(), pages.end());
      std::copy(pages.begin(), pages.end(), sel.begin() + (s * b.Hk + h) * K);
    }
  const Shape qs{b.S, b.Hq, b.D};
  std::vector<uint16_t> cpu_out(static_cast<size_t>(qs.numel()));
  std::vector<int32_t> cpu_scratch(static_cast<size_t>(ops::sparse_decode_scratch_ints(b.S, b.Hk, K, b.BS)));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  ops::sparse_decode_attention(b.host(cpu_out, qs), b.host(b.q.bits, qs), b.host(b.k.bits, b.cache_shape()),
                               b.host(b.v.bits, b.cache_shape()), cuda_test::host_view(b.bt, {b.S, b.MB}),
                               cuda_test::host_view(b.ctx, {b.S}), cuda_test::host_view(sel, {b.S, b.Hk, K}), scale,
                               cuda_test::host_view(cpu_scratch, {static_cast<int64_t>(cpu_scratch.size())}));
  DeviceTensor q(DType::kBF16, qs, b.q.bits), kc(DType::kBF16, b.cache_shape(), b.k.bits),
      vc(DType::kBF16, b.cache_shape(), b.v.bits), bt(DType::kI32, {b.S, b.MB}, b.bt), ctx(DType::kI32, {b.S}, b.ctx),
      selected(DType::kI32, {b.S, b.Hk, K}, sel), out(DType::kBF16, qs),
      scratch(DType::kI32, {static_cast<int64_t>(cpu_scratch.size())});
  out.fill_bytes(0xff);  // NaN
  ops::sparse_decode_attention(out.view(), q.view(), kc.view(), vc.view(), bt.view(), ctx.view(), selected.view(),
                               scale, scratch.view(), on());
  cuda_test::expect_close(out.download_f32(), cuda_test::bf16_bits_to_f32(cpu_out), 1e-2f, 2e-2f,
                          "sparse_decode_attention D " + std::to_string(d) + " G " + std::to_string(hq / hk));
}

TEST(CudaSparse, AttentionOverSelectedPagesMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  check_attention(32, 8, 128, 16, 3);  // Qwen3-4B / 8B heads
  check_attention(16, 8, 128, 7, 4);   // odd block size
  check_attention(8, 8, 64, 16, 5);    // no GQA, D 64
  check_attention(16, 2, 64, 5, 6);    // group of 8
}

}  // namespace
}  // namespace nanovllm

namespace nanovllm {
namespace {

// Per-layer time of one decode step's attention on the GPU-resident target shape of issue #30: 8
// sequences x 32K context, Qwen3-4B heads (Hq 32, Hk 8, D 128), blocks of 16 and 32. Dense paged_attention against
// the Quest pipeline at a 2048-token budget (scores, selection, sparse attention; the metadata update of
// the step's one new token per sequence is timed apart). Each variant is captured in a CUDA graph and
// replayed; the median replay is reported. KV: 1 GiB, far past L2. Run with
// --gtest_also_run_disabled_tests --gtest_filter='CudaSparseBench.*'.
void bench_decode_8x32k(int64_t BS) {
  const int64_t S = 8, Hq = 32, Hk = 8, D = 128, ctx = 32768, pages = ctx / BS, NB = S * pages;
  const int64_t budget_tokens = 2048, K = budget_tokens / BS;
  // Cheap deterministic bf16 values in [-2, 2) (a full random fill of 2 x 537M values is slow on the host).
  std::vector<uint16_t> kv(static_cast<size_t>(NB * BS * Hk * D));
  uint32_t x = 12345;
  for (auto& v : kv) {
    x = x * 1664525u + 1013904223u;
    v = f32_to_bf16(static_cast<float>(x >> 8) / static_cast<float>(1u << 24) * 4.0f - 2.0f);
  }
  const Shape cache{NB, BS, Hk, D};
  DeviceTensor kc(DType::kBF16, cache, kv), vc(DType::kBF16, cache, kv);
  kv.clear();
  kv.shrink_to_fit();
  std::mt19937 rng(9);
  cuda_test::Bf16Data qd = cuda_test::random_bf16(static_cast<size_t>(S * Hq * D), rng);
  std::vector<int32_t> bt(static_cast<size_t>(S * pages)), ctxs(static_cast<size_t>(S), static_cast<int32_t>(ctx));
  std::iota(bt.begin(), bt.end(), 0);
  std::shuffle(bt.begin(), bt.end(), rng);
  std::vector<int32_t> cu(static_cast<size_t>(S + 1)), all_slots(static_cast<size_t>(S * ctx));
  std::vector<int32_t> last(static_cast<size_t>(S));
  std::iota(cu.begin(), cu.end(), 0);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t pos = 0; pos < ctx; ++pos)
      all_slots[static_cast<size_t>(s * ctx + pos)] =
          bt[static_cast<size_t>(s * pages + pos / BS)] * static_cast<int32_t>(BS) + static_cast<int32_t>(pos % BS);
  for (int64_t s = 0; s < S; ++s) last[static_cast<size_t>(s)] = all_slots[static_cast<size_t>(s * ctx + ctx - 1)];
  DeviceTensor q(DType::kBF16, {S, Hq, D}, qd.bits), out(DType::kBF16, {S, Hq, D}),
      block_tables(DType::kI32, {S, pages}, bt), context(DType::kI32, {S}, ctxs), cu_d(DType::kI32, {S + 1}, cu),
      slots(DType::kI32, {S * ctx}, all_slots), step_slots(DType::kI32, {S}, last),
      k_min(DType::kBF16, {NB, Hk, D}), k_max(DType::kBF16, {NB, Hk, D}),
      scores(DType::kF32, {S, Hk, pages}), selected(DType::kI32, {S, Hk, K}),
      scratch(DType::kI32, {ops::sparse_decode_scratch_ints(S, Hk, K, BS)});
  ops::quest_update_pages(k_min.view(), k_max.view(), kc.view(), slots.view(), on());  // the prefill's metadata
  AttentionMetadata meta;
  meta.num_seqs = S;
  meta.num_tokens = S;
  meta.max_query_len = 1;
  meta.max_context_len = ctx;
  meta.cu_seqlens_q = cu_d.view();
  meta.context_lens = context.view();
  meta.block_tables = block_tables.view();
  meta.slot_mapping = step_slots.view();
  meta.block_size = BS;
  meta.num_leading_decodes = S;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const auto median_us = [&](auto&& body) { return cuda_test::graph_median_us(st, body); };
  const double dense =
      median_us([&] { ops::paged_attention(out.view(), q.view(), kc.view(), vc.view(), meta, scale, on(st)); });
  const double update = median_us(
      [&] { ops::quest_update_pages(k_min.view(), k_max.view(), kc.view(), step_slots.view(), on(st)); });
  const double score = median_us([&] {
    ops::quest_scores(scores.view(), q.view(), k_min.view(), k_max.view(), block_tables.view(), context.view(), BS,
                      on(st));
  });
  const double select =
      median_us([&] { ops::select_pages(selected.view(), scores.view(), context.view(), BS, 1, 2, on(st)); });
  const double attend = median_us([&] {
    ops::sparse_decode_attention(out.view(), q.view(), kc.view(), vc.view(), block_tables.view(), context.view(),
                                 selected.view(), scale, scratch.view(), on(st));
  });
  const double kv_gb = static_cast<double>(S * ctx * Hk * D * 2 * 2) / 1e9;
  std::printf("8 x 32K, Hq 32 / Hk 8 / D 128, block %lld, budget %lld tokens; per layer:\n",
              static_cast<long long>(BS), static_cast<long long>(budget_tokens));
  std::printf("  dense paged_attention   %8.1f us  (%.0f GB/s of KV)\n", dense, kv_gb / (dense * 1e-6));
  std::printf("  quest_update_pages      %8.1f us\n", update);
  std::printf("  quest_scores            %8.1f us\n", score);
  std::printf("  select_pages            %8.1f us\n", select);
  std::printf("  sparse_decode_attention %8.1f us\n", attend);
  std::printf("  quest total             %8.1f us  = %.3f x dense\n", update + score + select + attend,
              (update + score + select + attend) / dense);
  CUDA_CHECK(cudaStreamDestroy(st));
}

TEST(CudaSparseBench, DISABLED_Decode8x32K) {
  SKIP_WITHOUT_CUDA();
  for (int64_t block_size : {16, 32}) bench_decode_8x32k(block_size);
}

}  // namespace
}  // namespace nanovllm
