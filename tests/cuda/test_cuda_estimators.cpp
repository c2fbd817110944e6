// The sparse prefill pattern estimators on CUDA against the CPU reference on the same bf16 data (a paged cache with
// shuffled blocks): chunks after a prefix starting mid-block, contexts not a multiple of the pattern block, GQA groups
// 1 to 16, head_dim 64 / 128, thresholds below and at 1. Structured inputs (every key block and every query block of a
// head gets its own random offset direction) keep the blocks' scores well apart, and there the lists must equal the
// CPU's exactly. On plain noise the pooled scores crowd together, and a last-bit difference of an exponential may swap
// near-tied blocks: there every list must be increasing, hold the sink and the diagonal, cover threshold of each of its
// query heads' mass (recomputed here in double), and differ from the CPU's by at most two blocks. Vertical-slash
// (MInference) and FlexPrefill: planted columns, diagonals and hot blocks, exact and tolerant comparisons (their
// section below says which and why). The tests with a check that also holds on an fp8 KV cache (codes + row scales on
// both backends) run on both caches (CudaPatternEstimatorsByKvDtype.*/Bf16 and /Fp8), with tolerances per dtype.
// Plus a 128K timing benchmark (DISABLED_): estimator time next to the block-sparse attention of its pattern.
#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <iterator>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/kernels/kv_cache.h"
#include "nanovllm/kernels/pattern_estimators.h"
#include "nanovllm/kernels/sparse_ops.h"

namespace nanovllm {
namespace {

using cuda_test::DeviceTensor;
using cuda_test::on;

// One sequence over a bf16 paged cache (block size BS, shuffled blocks): context ctx, queries its last T positions.
// Values are noise of amplitude 1, plus (structured) per-block offsets of amplitude `offset`: key block j of KV head h
// and query block i of query head g each add one random vector, so block means differ by O(offset).
struct Chunk {
  int64_t ctx, T, Hq, Hk, D, BS, NB, bs;
  std::vector<int32_t> bt, cu, ctx_v, slots;
  std::vector<uint16_t> q, k;
  Chunk(int64_t c, int64_t t, int64_t hq, int64_t hk, int64_t d, int64_t cache_bs, int64_t pattern_bs, float offset,
        std::mt19937& rng)
      : ctx(c), T(t), Hq(hq), Hk(hk), D(d), BS(cache_bs), NB((c + cache_bs - 1) / cache_bs + 2), bs(pattern_bs) {
    bt.resize(static_cast<size_t>(NB));
    std::iota(bt.begin(), bt.end(), 0);
    std::shuffle(bt.begin(), bt.end(), rng);
    bt.resize(static_cast<size_t>((c + BS - 1) / BS));
    cu = {0, static_cast<int32_t>(t)};
    ctx_v = {static_cast<int32_t>(c)};
    for (int64_t p = c - t; p < c; ++p)
      slots.push_back(bt[static_cast<size_t>(p / BS)] * static_cast<int32_t>(BS) + static_cast<int32_t>(p % BS));
    const int64_t nqb = (c + pattern_bs - 1) / pattern_bs;
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> k_off(static_cast<size_t>(nqb * Hk * D)), q_off(static_cast<size_t>(nqb * Hq * D));
    for (float& x : k_off) x = offset * u(rng);
    for (float& x : q_off) x = offset * u(rng);
    k.assign(static_cast<size_t>(NB * BS * Hk * D), f32_to_bf16(1000.0f));  // garbage where no position maps
    for (int64_t p = 0; p < c; ++p) {
      const int64_t slot = int64_t{bt[static_cast<size_t>(p / BS)]} * BS + p % BS;
      for (int64_t e = 0; e < Hk * D; ++e)
        k[static_cast<size_t>(slot * Hk * D + e)] =
            f32_to_bf16(u(rng) + k_off[static_cast<size_t>(p / bs * Hk * D + e)]);
    }
    for (int64_t r = 0; r < t; ++r)
      for (int64_t e = 0; e < Hq * D; ++e)
        q.push_back(f32_to_bf16(u(rng) + q_off[static_cast<size_t>((c - t + r) / bs * Hq * D + e)]));
  }
  Shape cache() const { return {NB, BS, Hk, D}; }
  Shape rows() const { return {T, Hq, D}; }
  int64_t nqb() const { return (ctx + bs - 1) / bs; }
  int64_t first() const { return (ctx - T) / bs; }
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(D)); }
  AttentionMetadata meta(TensorView cu_t, TensorView ctx_t, TensorView bt_t, TensorView slots_t) const {
    AttentionMetadata m;
    m.num_seqs = 1;
    m.num_tokens = T;
    m.max_query_len = T;
    m.max_context_len = ctx;
    m.cu_seqlens_q = cu_t;
    m.context_lens = ctx_t;
    m.block_tables = bt_t;
    m.slot_mapping = slots_t;
    m.block_size = BS;
    return m;
  }
  float qf(int64_t pos, int64_t g, int64_t d) const {
    return bf16_to_f32(q[static_cast<size_t>(((pos - (ctx - T)) * Hq + g) * D + d)]);
  }
  float kf(int64_t pos, int64_t h, int64_t d) const {
    const int64_t slot = int64_t{bt[static_cast<size_t>(pos / BS)]} * BS + pos % BS;
    const auto i = static_cast<size_t>((slot * Hk + h) * D + d);
    return fp8 ? fp8_e4m3_to_f32(k_codes[i]) * k_scales[i / static_cast<size_t>(D)] : bf16_to_f32(k[i]);
  }
  // An fp8 KV cache (kernels/kv_cache.h): the keys quantized per (slot, KV head) row into codes [NB, BS, Hk, D] and
  // scales [NB, BS, Hk], which both backends then read; kf() returns the dequantized key (code x scale).
  bool fp8 = false;
  std::vector<uint8_t> k_codes;
  std::vector<float> k_scales;
  void quantize_keys() {
    k_codes.resize(k.size());
    k_scales.resize(k.size() / static_cast<size_t>(D));
    const auto n = static_cast<size_t>(D);
    std::vector<float> row(n);
    for (size_t r = 0; r < k_scales.size(); ++r) {
      for (size_t d = 0; d < n; ++d) row[d] = bf16_to_f32(k[r * n + d]);
      k_scales[r] = quantize_fp8_kv_row(row.data(), D, k_codes.data() + r * n);
    }
    fp8 = true;
  }
  void set_q(int64_t pos, int64_t g, int64_t d, float v) {
    q[static_cast<size_t>(((pos - (ctx - T)) * Hq + g) * D + d)] = f32_to_bf16(v);
  }
  void set_k(int64_t pos, int64_t h, int64_t d, float v) {
    NANOVLLM_CHECK(!fp8, "set_k after quantize_keys");
    const int64_t slot = int64_t{bt[static_cast<size_t>(pos / BS)]} * BS + pos % BS;
    k[static_cast<size_t>((slot * Hk + h) * D + d)] = f32_to_bf16(v);
  }
};

// [Hk][NQB] lists of the chunk's query blocks (rows before it are not written: left empty here) from [Hk, NQB] counts
// and [Hk, NQB, width] entries; entries past a count must be -1.
std::vector<std::vector<int32_t>> unpack(const Chunk& c, const std::vector<int32_t>& counts,
                                         const std::vector<int32_t>& index, int64_t width, const std::string& what) {
  std::vector<std::vector<int32_t>> rows;
  for (int64_t r = 0; r < c.Hk * c.nqb(); ++r) {
    if (r % c.nqb() < c.first()) {
      rows.emplace_back();
      continue;
    }
    const int32_t n = counts[static_cast<size_t>(r)];
    EXPECT_TRUE(n >= 0 && n <= width) << what << ": count " << n;
    const auto* row = &index[static_cast<size_t>(r * width)];
    rows.emplace_back(row, row + std::clamp<int64_t>(n, 0, width));
    for (int64_t e = std::clamp<int64_t>(n, 0, width); e < width; ++e)
      EXPECT_EQ(row[e], -1) << what << ": row " << r << " entry " << e;
  }
  return rows;
}

// An estimate's lists: [Hk][NQB] vectors of key blocks and of columns, and whether the column views came back
// all empty (counts 0, entries -1, rows before the chunk included).
struct Lists {
  std::vector<std::vector<int32_t>> blocks, columns;
  bool columns_empty = true;
  const std::vector<int32_t>& at(const Chunk& c, int64_t h, int64_t i) const {
    return blocks[static_cast<size_t>(h * c.nqb() + i)];
  }
  const std::vector<int32_t>& columns_at(const Chunk& c, int64_t h, int64_t i) const {
    return columns[static_cast<size_t>(h * c.nqb() + i)];
  }
};

// Runs `estimate` (an op with the pattern_estimators.h signature, knobs bound) on the CPU and on CUDA; the lists of
// both (column lists given, `cols` wide, poisoned; block lists one wider than needed, poisoned).
template <class Estimate>
std::pair<Lists, Lists> run_both(const Chunk& c, Estimate&& estimate, const std::string& what, int64_t cols = 3) {
  const int64_t nqb = c.nqb(), width = nqb + 1;
  std::vector<int32_t> bt = c.bt, cu = c.cu, ctx = c.ctx_v, slots = c.slots;
  std::vector<uint16_t> q = c.q, k = c.k;
  const int64_t MB = static_cast<int64_t>(bt.size());
  std::vector<int32_t> bc(static_cast<size_t>(c.Hk * nqb), 7777), bi(static_cast<size_t>(c.Hk * nqb * width), 7777),
      cc(bc.size(), 7777), ci(static_cast<size_t>(c.Hk * nqb * cols), 7777);
  ops::BlockSparsePattern hp;
  hp.block_size = c.bs;
  hp.block_counts = cuda_test::host_view(bc, {c.Hk, nqb});
  hp.block_index = cuda_test::host_view(bi, {c.Hk, nqb, width});
  hp.column_counts = cuda_test::host_view(cc, {c.Hk, nqb});
  hp.column_index = cuda_test::host_view(ci, {c.Hk, nqb, cols});
  std::vector<uint8_t> codes = c.k_codes;
  std::vector<float> scales = c.k_scales;
  const Shape scale_shape{c.NB, c.BS, c.Hk};
  const KvCacheTensor host_k = c.fp8 ? KvCacheTensor(TensorView(codes.data(), DType::kF8E4M3, c.cache()),
                                                     cuda_test::host_view(scales, scale_shape))
                                     : KvCacheTensor(TensorView(k.data(), DType::kBF16, c.cache()));
  estimate(hp, TensorView(q.data(), DType::kBF16, c.rows()), host_k,
           c.meta(cuda_test::host_view(cu, {2}), cuda_test::host_view(ctx, {1}), cuda_test::host_view(bt, {1, MB}),
                  cuda_test::host_view(slots, {c.T})),
           ops::Stream{});
  Lists cpu{unpack(c, bc, bi, width, what + " (cpu)"), unpack(c, cc, ci, cols, what + " (cpu columns)")};

  DeviceTensor d_q(DType::kBF16, c.rows(), q), d_k(DType::kBF16, c.cache(), k), d_bt(DType::kI32, {1, MB}, bt),
      d_cu(DType::kI32, {2}, cu), d_ctx(DType::kI32, {1}, ctx), d_slots(DType::kI32, {c.T}, slots),
      d_bc(DType::kI32, {c.Hk, nqb}), d_bi(DType::kI32, {c.Hk, nqb, width}), d_cc(DType::kI32, {c.Hk, nqb}),
      d_ci(DType::kI32, {c.Hk, nqb, cols});
  for (DeviceTensor* t : {&d_bc, &d_bi, &d_cc, &d_ci}) t->fill_bytes(0x5a);
  std::unique_ptr<DeviceTensor> d_codes, d_scales;
  KvCacheTensor device_k = d_k.view();
  if (c.fp8) {
    d_codes = std::make_unique<DeviceTensor>(DType::kF8E4M3, c.cache(), codes);
    d_scales = std::make_unique<DeviceTensor>(DType::kF32, scale_shape, scales);
    device_k = KvCacheTensor(d_codes->view(), d_scales->view());
  }
  ops::BlockSparsePattern dp;
  dp.block_size = c.bs;
  dp.block_counts = d_bc.view();
  dp.block_index = d_bi.view();
  dp.column_counts = d_cc.view();
  dp.column_index = d_ci.view();
  estimate(dp, d_q.view(), device_k, c.meta(d_cu.view(), d_ctx.view(), d_bt.view(), d_slots.view()), on());
  const std::vector<int32_t> gcc = d_cc.download<int32_t>(), gci = d_ci.download<int32_t>();
  Lists gpu{unpack(c, d_bc.download<int32_t>(), d_bi.download<int32_t>(), width, what + " (cuda)"),
            unpack(c, gcc, gci, cols, what + " (cuda columns)")};
  for (int32_t n : gcc) gpu.columns_empty = gpu.columns_empty && n == 0;
  for (int32_t x : gci) gpu.columns_empty = gpu.columns_empty && x == -1;
  return {std::move(cpu), std::move(gpu)};
}

// AvgPool's softmax over query block i's causal key blocks for query head g, in double (the test's own reference); the
// chunk's last query block: the last query's exact attention summed per key block.
std::vector<double> avgpool_mass(const Chunk& c, int64_t g, int64_t i) {
  const int64_t h = g / (c.Hq / c.Hk);
  std::vector<double> mq(static_cast<size_t>(c.D), 0.0), s(static_cast<size_t>(i + 1), 0.0);
  if (i == c.nqb() - 1) {
    std::vector<double> logit(static_cast<size_t>(c.ctx), 0.0);
    for (int64_t p = 0; p < c.ctx; ++p) {
      for (int64_t d = 0; d < c.D; ++d) logit[static_cast<size_t>(p)] += double{c.qf(c.ctx - 1, g, d)} * c.kf(p, h, d);
      logit[static_cast<size_t>(p)] *= c.scale();
    }
    const double m = *std::max_element(logit.begin(), logit.end());
    double sum = 0;
    for (double& x : logit) sum += (x = std::exp(x - m));
    for (int64_t p = 0; p < c.ctx; ++p) s[static_cast<size_t>(p / c.bs)] += logit[static_cast<size_t>(p)] / sum;
    return s;
  }
  const int64_t r0 = std::max(i * c.bs, c.ctx - c.T), r1 = std::min((i + 1) * c.bs, c.ctx);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t d = 0; d < c.D; ++d) mq[static_cast<size_t>(d)] += c.qf(r, g, d) / static_cast<double>(r1 - r0);
  for (int64_t j = 0; j <= i; ++j) {
    const int64_t p1 = std::min((j + 1) * c.bs, c.ctx);
    for (int64_t p = j * c.bs; p < p1; ++p)
      for (int64_t d = 0; d < c.D; ++d)
        s[static_cast<size_t>(j)] += mq[static_cast<size_t>(d)] * c.kf(p, h, d) / static_cast<double>(p1 - j * c.bs);
    s[static_cast<size_t>(j)] *= c.scale();
  }
  const double m = *std::max_element(s.begin(), s.end());
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - m));
  for (double& x : s) x /= sum;
  return s;
}

// XAttention's mass of query block i over its causal key blocks for query head g, in double: per tile row m (stride
// S) the softmax over tiles n <= m of scale / S x the antidiagonal sum, summed per key block.
std::vector<double> xattention_mass(const Chunk& c, int64_t S, int64_t g, int64_t i) {
  const int64_t h = g / (c.Hq / c.Hk), start = c.ctx - c.T;
  std::vector<double> mass(static_cast<size_t>(i + 1), 0.0), row;
  for (int64_t m = std::max(i * c.bs, start) / S; m * S < std::min((i + 1) * c.bs, c.ctx); ++m) {
    row.assign(static_cast<size_t>(m + 1), 0.0);
    for (int64_t n = 0; n <= m; ++n) {
      for (int64_t s = 0; s < S; ++s) {
        const int64_t qp = m * S + S - 1 - s, kp = n * S + s;
        if (qp < start || qp >= c.ctx || kp >= c.ctx) continue;
        for (int64_t d = 0; d < c.D; ++d) row[static_cast<size_t>(n)] += double{c.qf(qp, g, d)} * c.kf(kp, h, d);
      }
      row[static_cast<size_t>(n)] *= c.scale() / static_cast<double>(S);
    }
    const double mx = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (double& x : row) sum += (x = std::exp(x - mx));
    for (int64_t n = 0; n <= m; ++n) mass[static_cast<size_t>(n * S / c.bs)] += row[static_cast<size_t>(n)] / sum;
  }
  return mass;
}

// The checks that hold whatever the near-ties: the CUDA lists increasing, sink and diagonal in, >= threshold of every
// group member's mass (mass_of(g, i)) covered (up to `slack`: the kernel's masses' rounding), at most `max_diff`
// blocks apart from the CPU's.
template <class Mass>
void expect_valid(const Chunk& c, const Lists& cpu, const Lists& gpu, double threshold, int max_diff, Mass&& mass_of,
                  const std::string& what, double slack = 1e-4) {
  for (int64_t h = 0; h < c.Hk; ++h)
    for (int64_t i = c.first(); i < c.nqb(); ++i) {
      const std::vector<int32_t>& l = gpu.at(c, h, i);
      const std::string at = what + " head " + std::to_string(h) + " block " + std::to_string(i);
      ASSERT_FALSE(l.empty()) << at;
      EXPECT_TRUE(std::is_sorted(l.begin(), l.end()) && std::adjacent_find(l.begin(), l.end()) == l.end()) << at;
      EXPECT_EQ(l.front(), 0) << at;
      EXPECT_EQ(l.back(), i) << at;
      for (int64_t g = h * (c.Hq / c.Hk); g < (h + 1) * (c.Hq / c.Hk); ++g) {
        const std::vector<double> m = mass_of(g, i);
        double kept = 0;
        for (int32_t j : l) kept += m[static_cast<size_t>(j)];
        EXPECT_GE(kept, std::min(threshold, 1.0) - slack) << at << " query head " << g;
      }
      const std::vector<int32_t>& r = cpu.at(c, h, i);
      std::vector<int32_t> diff;
      std::set_symmetric_difference(l.begin(), l.end(), r.begin(), r.end(), std::back_inserter(diff));
      EXPECT_LE(static_cast<int>(diff.size()), max_diff) << at;
    }
}

struct Case {
  int64_t ctx, T, Hq, Hk, D, cache_bs, bs;
};

std::string describe(const Case& k, double threshold) {
  return "ctx " + std::to_string(k.ctx) + " T " + std::to_string(k.T) + " Hq " + std::to_string(k.Hq) + " Hk " +
         std::to_string(k.Hk) + " D " + std::to_string(k.D) + " cache bs " + std::to_string(k.cache_bs) + " bs " +
         std::to_string(k.bs) + " threshold " + std::to_string(threshold);
}

const std::vector<Case> kCases = {
    {1000, 1000, 32, 8, 128, 16, 128},  // Qwen3-4B heads (G 4), ragged last block
    {777, 300, 8, 1, 64, 16, 64},       // G 8, chunk after a prefix, starting mid-block
    {515, 515, 4, 4, 128, 32, 128},     // G 1
    {1100, 611, 16, 2, 128, 16, 32},    // G 8, 32-token blocks
    {600, 600, 16, 1, 64, 16, 32},      // G 16: two passes of 8 query heads
    {300, 1, 8, 2, 64, 16, 16},         // one query row
    {4177, 2000, 4, 2, 64, 16, 16},     // 262 blocks: sorts of 256+ entries
    {333, 200, 6, 2, 36, 16, 32},       // G 3, head_dim 36: element-wise pooling loads
};

// ---- a bf16 or an fp8 KV cache (--kv-cache-dtype fp8, docs/kv_cache.md) ----
// On fp8 the chunks' keys are quantized (codes + per-row scales), read by both backends; the test's own masses and sums
// use the dequantized keys (Chunk::kf). AvgPool (and FlexPrefill's pooled pairs) read code x scale in f32 like the CPU,
// so their lists equal the CPU's where the scores are separated, as on bf16. XAttention's GEMM and the last queries'
// attention (vertical-slash, FlexPrefill's vertical-slash heads) take bf16(code x scale) keys, one rounding (relative
// 2^-9) more than the CPU's f32 product: logits may move by ~1e-2 at these magnitudes (an estimate, not a
// measurement), so the masses they rank move by ~1% (a few % at the extremes over many keys); the fp8 checks allow
// 5e-2 relative for picks and 1e-2 absolute for a covered mass, a cover count landing at the threshold may take one
// block more or less, and up to a fifth of XAttention's lists may differ from the CPU's. Planted structure stays far
// above that. The fp8 runs take fewer cases and knobs, and seeds of their own (the data their tolerances were
// measured on, on an H200).
const std::vector<Case> kFp8Cases = {kCases[0], kCases[1], kCases[3], kCases[5], kCases[6], kCases[7]};

enum class KvDtype { kBf16, kFp8 };

// A test on either KV cache: by_dtype(on_bf16, on_fp8) picks its seeds, grids and tolerances.
class CudaPatternEstimatorsByKvDtype : public ::testing::TestWithParam<KvDtype> {
 protected:
  bool fp8() const { return GetParam() == KvDtype::kFp8; }
  template <class T>
  T by_dtype(T on_bf16, T on_fp8) const {
    return fp8() ? std::move(on_fp8) : std::move(on_bf16);
  }
  const std::vector<Case>& cases() const { return fp8() ? kFp8Cases : kCases; }
  std::string named(const std::string& what) const { return fp8() ? "fp8 " + what : what; }
  // On fp8 the keys quantized (after anything planted in them).
  void quantize_if_fp8(Chunk& c) const {
    if (fp8()) c.quantize_keys();
  }
  // A chunk of fresh random data of case k's shape (Chunk's offset and rng).
  Chunk chunk(const Case& k, float offset, std::mt19937& rng) const {
    Chunk c(k.ctx, k.T, k.Hq, k.Hk, k.D, k.cache_bs, k.bs, offset, rng);
    quantize_if_fp8(c);
    return c;
  }
};

INSTANTIATE_TEST_SUITE_P(, CudaPatternEstimatorsByKvDtype, ::testing::Values(KvDtype::kBf16, KvDtype::kFp8),
                         [](const ::testing::TestParamInfo<KvDtype>& info) {
                           return std::string(info.param == KvDtype::kFp8 ? "Fp8" : "Bf16");
                         });

auto avgpool_with(double threshold) {
  return [threshold](const ops::BlockSparsePattern& p, TensorView q, const KvCacheTensor& k,
                     const AttentionMetadata& m, ops::Stream s) {
    ops::avgpool_estimate(p, q, k, m, 1.0f / std::sqrt(static_cast<float>(q.dim(2))), {.threshold = threshold}, s);
  };
}

TEST_P(CudaPatternEstimatorsByKvDtype, AvgPoolMatchesTheCpuOnSeparatedScores) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = by_dtype(10u, 1200u);
  for (const Case& k : cases())
    for (double threshold : by_dtype<std::vector<double>>({0.5, 0.9, 0.97, 1.0}, {0.5, 0.9, 1.0})) {
      std::mt19937 rng(seed++);
      const Chunk c = chunk(k, 2.0f, rng);
      const std::string what = named("avgpool " + describe(k, threshold));
      const auto [cpu, gpu] = run_both(c, avgpool_with(threshold), what);
      EXPECT_EQ(gpu.blocks, cpu.blocks) << what;
      EXPECT_TRUE(gpu.columns_empty) << what;
      expect_valid(c, cpu, gpu, threshold, 0, [&](int64_t g, int64_t i) { return avgpool_mass(c, g, i); }, what);
    }
}

// Near-ties (an exponential's last bit) on noise, the same tolerance on both caches. On fp8 each seed first draws the
// separated test's chunk (its fp8 seeds and thresholds), then the noise chunk checked here.
TEST_P(CudaPatternEstimatorsByKvDtype, AvgPoolIsValidAndCloseToTheCpuOnNoise) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = by_dtype(100u, 1200u);
  for (const Case& k : cases())
    for (double threshold : by_dtype<std::vector<double>>({0.3, 0.9}, {0.5, 0.9, 1.0})) {
      std::mt19937 rng(seed++);
      if (fp8()) static_cast<void>(Chunk(k.ctx, k.T, k.Hq, k.Hk, k.D, k.cache_bs, k.bs, 2.0f, rng));
      const Chunk c = chunk(k, 0.0f, rng);
      const std::string what = named("avgpool noise " + describe(k, threshold));
      const auto [cpu, gpu] = run_both(c, avgpool_with(threshold), what);
      expect_valid(c, cpu, gpu, threshold, 2, [&](int64_t g, int64_t i) { return avgpool_mass(c, g, i); }, what);
    }
}

auto xattention_with(int64_t stride, double threshold) {
  return [stride, threshold](const ops::BlockSparsePattern& p, TensorView q, const KvCacheTensor& k,
                             const AttentionMetadata& m, ops::Stream s) {
    ops::xattention_estimate(p, q, k, m, 1.0f / std::sqrt(static_cast<float>(q.dim(2))),
                             {.stride = stride, .threshold = threshold}, s);
  };
}

// The tile scores come from a bf16 GEMM (another summation order than the CPU's fp32 dots): exact equality where the
// masses are well apart; on bf16 one block of slack per KV head list for a cumulative sum landing at the threshold,
// masses covered up to 1e-4, at most 1 list in 50 differing from the CPU's; on fp8 (bf16(code x scale) keys) two
// blocks, 1e-2 and 1 in 5.
TEST_P(CudaPatternEstimatorsByKvDtype, XAttentionIsValidAndCloseToTheCpuOnSeparatedScores) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = by_dtype(200u, 1400u);
  const int max_diff = by_dtype(1, 2);
  const double slack = by_dtype(1e-4, 1e-2);
  const int64_t lists_per_difference = by_dtype<int64_t>(50, 5);
  for (const Case& k : cases())
    for (double threshold : {0.5, 0.9, 1.0}) {
      const int64_t stride = k.bs % 8 == 0 ? 8 : 4;
      std::mt19937 rng(seed++);
      const Chunk c = chunk(k, 2.0f, rng);
      const std::string what = named("xattention stride " + std::to_string(stride) + " " + describe(k, threshold));
      const auto [cpu, gpu] = run_both(c, xattention_with(stride, threshold), what);
      EXPECT_TRUE(gpu.columns_empty) << what;
      expect_valid(c, cpu, gpu, threshold, max_diff,
                   [&](int64_t g, int64_t i) { return xattention_mass(c, stride, g, i); }, what, slack);
      int64_t differ = 0;
      for (size_t r = 0; r < cpu.blocks.size(); ++r) differ += cpu.blocks[r] != gpu.blocks[r];
      EXPECT_LE(differ, static_cast<int64_t>(cpu.blocks.size()) / lists_per_difference)
          << what << ": lists differing from the CPU's";
    }
}

TEST(CudaPatternEstimators, XAttentionIsValidAndCloseToTheCpuOnNoise) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 300;
  for (const Case& k : kCases) {
    std::mt19937 rng(seed++);
    const Chunk c(k.ctx, k.T, k.Hq, k.Hk, k.D, k.cache_bs, k.bs, 0.0f, rng);
    const std::string what = "xattention noise " + describe(k, 0.9);
    const auto [cpu, gpu] = run_both(c, xattention_with(4, 0.9), what);
    expect_valid(c, cpu, gpu, 0.9, 2, [&](int64_t g, int64_t i) { return xattention_mass(c, 4, g, i); }, what);
  }
}

// kBlockBudget on CUDA: the group's union trimmed to max_blocks by the group's largest mass. On structured data the
// AvgPool lists equal the CPU's (same float masses and ranks, on either cache) and, on bf16, the XAttention lists
// (masses from a bf16 GEMM) differ in at most 1 in 50 (not run on fp8); every list is increasing, within the budget
// and holds the sink and the diagonal.
TEST_P(CudaPatternEstimatorsByKvDtype, BlockBudgetMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = by_dtype(400u, 1300u);
  for (const Case& k : cases())
    for (int64_t max_blocks : by_dtype<std::vector<int64_t>>({2, 3, 7}, {2, 5})) {
      std::mt19937 rng(seed++);
      const Chunk c = chunk(k, 2.0f, rng);
      const int64_t stride = k.bs % 8 == 0 ? 8 : 4;
      const float sc = c.scale();
      const std::string what = named(describe(k, 0.95) + " max_blocks " + std::to_string(max_blocks));
      const auto [ap_cpu, ap_gpu] = run_both(
          c,
          [&](const ops::BlockSparsePattern& p, TensorView q, const KvCacheTensor& kc, const AttentionMetadata& m,
              ops::Stream s) {
            ops::avgpool_estimate(p, q, kc, m, sc, {.threshold = 0.95, .max_blocks = max_blocks}, s);
          },
          "avgpool " + what);
      EXPECT_EQ(ap_gpu.blocks, ap_cpu.blocks) << "avgpool " << what;
      std::vector<const Lists*> budgeted = {&ap_gpu};
      std::pair<Lists, Lists> xa;  // CPU, CUDA
      if (!fp8()) {
        xa = run_both(
            c,
            [&](const ops::BlockSparsePattern& p, TensorView q, const KvCacheTensor& kc, const AttentionMetadata& m,
                ops::Stream s) {
              ops::xattention_estimate(p, q, kc, m, sc,
                                       {.stride = stride, .threshold = 0.95, .max_blocks = max_blocks}, s);
            },
            "xattention " + what);
        int64_t differ = 0;
        for (size_t r = 0; r < xa.first.blocks.size(); ++r) differ += xa.first.blocks[r] != xa.second.blocks[r];
        EXPECT_LE(differ, static_cast<int64_t>(xa.first.blocks.size()) / 50) << "xattention " << what;
        budgeted.push_back(&xa.second);
      }
      for (const Lists* l : budgeted)
        for (int64_t h = 0; h < c.Hk; ++h)
          for (int64_t i = c.first(); i < c.nqb(); ++i) {
            const std::vector<int32_t>& b = l->at(c, h, i);
            ASSERT_FALSE(b.empty()) << what;
            EXPECT_LE(static_cast<int64_t>(b.size()), max_blocks) << what << " head " << h << " block " << i;
            EXPECT_TRUE(std::is_sorted(b.begin(), b.end()) && std::adjacent_find(b.begin(), b.end()) == b.end());
            EXPECT_EQ(b.front(), 0) << what;
            EXPECT_EQ(b.back(), i) << what;
          }
    }
}

// ---- vertical-slash (MInference) and FlexPrefill ----
// Both read the last queries' attention through bf16 tensor-core scores, so their sums differ from the CPU's by
// rounding (~1e-6 relative). Where the data separate the picks (planted lines and diagonals; per-block offsets for
// FlexPrefill's block choices) the lists must equal the CPU's. On noise a near-tie may swap a pick: there the
// vertical-slash lists of both backends are checked against what the test's own double-precision sums allow, and the
// FlexPrefill lists against the CPU's up to a few blocks per row.

// Failures of a check over many rows: the count and the first few, reported once.
struct Problems {
  int count = 0;
  std::string first;
  void add(const std::string& what) {
    if (count++ < 5) first += what + "\n";
  }
};

std::string str(const std::vector<int32_t>& v) {
  std::string s = "{";
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s + "}";
}

// Key position `key` is attended by query block i of KV head h: a listed key block holds it, or a column list.
bool covers(const Chunk& c, const Lists& l, int64_t h, int64_t i, int64_t key) {
  const std::vector<int32_t>& b = l.at(c, h, i);
  const std::vector<int32_t>& cols = l.columns_at(c, h, i);
  return std::binary_search(b.begin(), b.end(), static_cast<int32_t>(key / c.bs)) ||
         std::binary_search(cols.begin(), cols.end(), static_cast<int32_t>(key));
}

// Every block list of the chunk increasing, without repeats, holding the sink and the diagonal block.
void expect_valid_blocks(const Chunk& c, const Lists& l, const std::string& what) {
  Problems bad;
  for (int64_t h = 0; h < c.Hk; ++h)
    for (int64_t i = c.first(); i < c.nqb(); ++i) {
      const std::vector<int32_t>& b = l.at(c, h, i);
      if (b.empty() || !std::is_sorted(b.begin(), b.end()) || std::adjacent_find(b.begin(), b.end()) != b.end() ||
          b.front() != 0 || b.back() != i)
        bad.add("head " + std::to_string(h) + " block " + std::to_string(i) + ": " + str(b));
    }
  EXPECT_EQ(bad.count, 0) << what << ": invalid block lists, first:\n" << bad.first;
}

// The most key blocks by which a row's lists differ between a and b.
int64_t max_row_difference(const Chunk& c, const Lists& a, const Lists& b) {
  int64_t most = 0;
  for (int64_t h = 0; h < c.Hk; ++h)
    for (int64_t i = c.first(); i < c.nqb(); ++i) {
      std::vector<int32_t> diff;
      const std::vector<int32_t>&x = a.at(c, h, i), &y = b.at(c, h, i);
      std::set_symmetric_difference(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(diff));
      most = std::max(most, static_cast<int64_t>(diff.size()));
    }
  return most;
}

// Query head g's last `last` rows' causal softmax, in double (the test's own reference), summed per key position
// (vertical) and per diagonal d = query position - key position (slash).
struct LastRowSums {
  std::vector<double> vertical, slash;
};

LastRowSums last_row_sums(const Chunk& c, int64_t g, int64_t last) {
  const int64_t h = g / (c.Hq / c.Hk), D = c.D;
  std::vector<double> K(static_cast<size_t>(c.ctx * D)), qv(static_cast<size_t>(D)), row;
  for (int64_t p = 0; p < c.ctx; ++p)
    for (int64_t d = 0; d < D; ++d) K[static_cast<size_t>(p * D + d)] = c.kf(p, h, d);
  LastRowSums r{std::vector<double>(static_cast<size_t>(c.ctx), 0.0),
                std::vector<double>(static_cast<size_t>(c.ctx), 0.0)};
  for (int64_t pos = c.ctx - last; pos < c.ctx; ++pos) {
    for (int64_t d = 0; d < D; ++d) qv[static_cast<size_t>(d)] = c.qf(pos, g, d);
    row.assign(static_cast<size_t>(pos + 1), 0.0);
    for (int64_t k = 0; k <= pos; ++k) {
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += qv[static_cast<size_t>(d)] * K[static_cast<size_t>(k * D + d)];
      row[static_cast<size_t>(k)] = dot * c.scale();
    }
    const double mx = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (double& x : row) sum += (x = std::exp(x - mx));
    for (int64_t k = 0; k <= pos; ++k) {
      r.vertical[static_cast<size_t>(k)] += row[static_cast<size_t>(k)] / sum;
      r.slash[static_cast<size_t>(pos - k)] += row[static_cast<size_t>(k)] / sum;
    }
  }
  return r;
}

// What a top-`count` pick over x (its first `forced` entries first, then by value) must take (sure) and may take
// (may) when the values it ranks are off from x by a relative error well below tol: an entry above the largest
// value left out by (1 + tol) is surely taken, one below the smallest taken by (1 - tol) surely not.
struct Pick {
  std::vector<uint8_t> sure, may;
};

Pick plausible_top(const std::vector<double>& x, int64_t count, int64_t forced, double tol) {
  const int64_t n = static_cast<int64_t>(x.size());
  count = std::min(count, n);
  forced = std::min(forced, n);
  Pick p{std::vector<uint8_t>(static_cast<size_t>(n), 0), std::vector<uint8_t>(static_cast<size_t>(n), 0)};
  for (int64_t k = 0; k < std::min(count, forced); ++k) p.sure[static_cast<size_t>(k)] = p.may[static_cast<size_t>(k)] = 1;
  const int64_t rest = count - forced;  // taken by value
  if (rest <= 0) return p;
  std::vector<double> others(x.begin() + forced, x.end());
  std::sort(others.begin(), others.end(), std::greater<>());
  const bool all = rest >= static_cast<int64_t>(others.size());
  const double in = others[static_cast<size_t>(rest - 1)], out = all ? 0.0 : others[static_cast<size_t>(rest)];
  for (int64_t k = forced; k < n; ++k) {
    p.sure[static_cast<size_t>(k)] = all || x[static_cast<size_t>(k)] > out * (1 + tol);
    p.may[static_cast<size_t>(k)] = x[static_cast<size_t>(k)] >= in * (1 - tol);
  }
  return p;
}

void unite(Pick& into, const Pick& p) {
  if (into.sure.empty()) {
    into = p;
    return;
  }
  for (size_t k = 0; k < p.sure.size(); ++k) {
    into.sure[k] |= p.sure[k];
    into.may[k] |= p.may[k];
  }
}

constexpr double kPickTolerance = 1e-3;  // relative; the sums' rounding (bf16 MMA scores, fp32 sums) is ~1e-6

// Per KV head, the union over its group of the columns and of the diagonals the test's sums allow for p (the sums
// the kernels rank off from the test's by a relative `tol` at most).
std::pair<std::vector<Pick>, std::vector<Pick>> vertical_slash_picks(const Chunk& c, const ops::VerticalSlashParams& p,
                                                                     double tol = kPickTolerance) {
  const int64_t last = std::min(p.last_q, c.T), G = c.Hq / c.Hk;
  std::vector<Pick> columns(static_cast<size_t>(c.Hk)), diagonals(static_cast<size_t>(c.Hk));
  for (int64_t g = 0; g < c.Hq; ++g) {
    const LastRowSums r = last_row_sums(c, g, last);
    unite(columns[static_cast<size_t>(g / G)], plausible_top(r.vertical, p.vertical, p.sink_tokens, tol));
    unite(diagonals[static_cast<size_t>(g / G)], plausible_top(r.slash, p.slash, p.recent_diagonals, tol));
  }
  return {columns, diagonals};
}

// A vertical-slash pattern against the picks the test's sums allow: valid lists (blocks increasing with the sink and
// the diagonal block; columns increasing, before the block, outside its listed blocks); every listed block crossed
// by a diagonal some query head of the group may pick and every surely picked diagonal's blocks listed; every column
// one some query head may pick, and every surely picked column before the block attended.
void expect_plausible_vertical_slash(const Chunk& c, const Lists& l, const std::vector<Pick>& columns,
                                     const std::vector<Pick>& diagonals, const std::string& what) {
  Problems bad;
  const int64_t B = c.bs;
  for (int64_t h = 0; h < c.Hk; ++h) {
    const Pick& v = columns[static_cast<size_t>(h)];
    const Pick& s = diagonals[static_cast<size_t>(h)];
    std::vector<int64_t> may_before(static_cast<size_t>(c.ctx + 1), 0);  // diagonals < x some head may pick
    for (int64_t d = 0; d < c.ctx; ++d)
      may_before[static_cast<size_t>(d + 1)] = may_before[static_cast<size_t>(d)] + s.may[static_cast<size_t>(d)];
    for (int64_t i = c.first(); i < c.nqb(); ++i) {
      const std::string at = "head " + std::to_string(h) + " block " + std::to_string(i);
      const std::vector<int32_t>& b = l.at(c, h, i);
      const std::vector<int32_t>& cols = l.columns_at(c, h, i);
      if (b.empty() || !std::is_sorted(b.begin(), b.end()) || std::adjacent_find(b.begin(), b.end()) != b.end() ||
          b.front() != 0 || b.back() != i) {
        bad.add(at + ": block list " + str(b));
        continue;
      }
      const auto listed = [&b](int64_t j) { return std::binary_search(b.begin(), b.end(), static_cast<int32_t>(j)); };
      const int64_t r0 = std::max(i * B, c.ctx - c.T), r1 = std::min((i + 1) * B, c.ctx);
      for (int32_t j : b) {
        if (j == 0 || j == i) continue;
        // Diagonal d meets rows [r0, r1) inside key block j for d in [lo, hi].
        const int64_t lo = std::max<int64_t>(0, r0 - (j + 1) * B + 1), hi = r1 - 1 - j * B;
        if (hi < lo || may_before[static_cast<size_t>(hi + 1)] == may_before[static_cast<size_t>(lo)])
          bad.add(at + ": key block " + std::to_string(j) + " lies on no diagonal a query head may pick");
      }
      for (int64_t d = 0; d < r1; ++d) {
        if (!s.sure[static_cast<size_t>(d)]) continue;
        for (int64_t j = std::max<int64_t>(r0 - d, 0) / B; j <= (r1 - 1 - d) / B; ++j)
          if (!listed(j)) bad.add(at + ": diagonal " + std::to_string(d) + " misses key block " + std::to_string(j));
      }
      if (!std::is_sorted(cols.begin(), cols.end()) || std::adjacent_find(cols.begin(), cols.end()) != cols.end())
        bad.add(at + ": columns " + str(cols));
      for (int32_t k : cols)
        if (k < 0 || k >= i * B || listed(k / B) || !v.may[static_cast<size_t>(k)])
          bad.add(at + ": column " + std::to_string(k) + " (listed blocks " + str(b) + ")");
      for (int64_t k = 0; k < i * B; ++k)
        if (v.sure[static_cast<size_t>(k)] && !covers(c, l, h, i, k))
          bad.add(at + ": surely picked column " + std::to_string(k) + " not attended");
    }
  }
  EXPECT_EQ(bad.count, 0) << what << ": " << bad.count << " problems, first:\n" << bad.first;
}

auto vertical_slash_with(const ops::VerticalSlashParams& params) {
  return [params](const ops::BlockSparsePattern& p, TensorView q, const KvCacheTensor& k, const AttentionMetadata& m,
                  ops::Stream s) {
    ops::vertical_slash_estimate(p, q, k, m, 1.0f / std::sqrt(static_cast<float>(q.dim(2))), params, s);
  };
}

int64_t column_width(const Chunk& c, const ops::VerticalSlashParams& p) {
  return std::max<int64_t>(1, ops::vertical_slash_max_columns(c.ctx, c.Hq / c.Hk, p.vertical));
}

std::string describe(const Case& k, const ops::VerticalSlashParams& p) {
  return describe(k, 0).substr(0, describe(k, 0).find(" threshold")) + " last_q " + std::to_string(p.last_q) +
         " vertical " + std::to_string(p.vertical) + " slash " + std::to_string(p.slash) + " sink " +
         std::to_string(p.sink_tokens) + " recent " + std::to_string(p.recent_diagonals);
}

// A vertical line at key v for the query heads `heads` (of one KV head h): v's key is 8 in dimension 3 + each head's
// place in the group and 0 elsewhere, and every chunk query of those heads adds 7 in its dimension. They put most of
// their last rows' attention on v; the group's other heads see v as noise.
void plant_column(Chunk& c, int64_t v, const std::vector<int64_t>& heads) {
  const int64_t G = c.Hq / c.Hk, h = heads.front() / G;
  for (int64_t d = 0; d < c.D; ++d) c.set_k(v, h, d, 0.0f);
  for (int64_t g : heads) {
    const int64_t dim = (3 + g % G) % c.D;
    c.set_k(v, h, dim, 8.0f);
    for (int64_t pos = c.ctx - c.T; pos < c.ctx; ++pos) c.set_q(pos, g, dim, c.qf(pos, g, dim) + 7.0f);
  }
}

// RoPE-like rotations (amplitude 2, frequencies 0.5^(8 f / pairs)) in every key at its position and in query head g's
// queries at position - delta[g]: q_p . k_j peaks at j = p - delta[g] and decays away from it, so g attends diagonal
// delta[g].
void plant_diagonals(Chunk& c, const std::vector<int64_t>& delta) {
  const int64_t pairs = c.D / 2;
  const auto angle = [pairs](int64_t p, int64_t f) {
    return static_cast<double>(p) * std::pow(0.5, static_cast<double>(f) * 8.0 / static_cast<double>(pairs));
  };
  for (int64_t j = 0; j < c.ctx; ++j)
    for (int64_t h = 0; h < c.Hk; ++h)
      for (int64_t f = 0; f < pairs; ++f) {
        c.set_k(j, h, 2 * f, static_cast<float>(2.0 * std::cos(angle(j, f))));
        c.set_k(j, h, 2 * f + 1, static_cast<float>(2.0 * std::sin(angle(j, f))));
      }
  for (int64_t g = 0; g < c.Hq; ++g)
    for (int64_t pos = c.ctx - c.T; pos < c.ctx; ++pos)
      for (int64_t f = 0; f < pairs; ++f) {
        c.set_q(pos, g, 2 * f, static_cast<float>(2.0 * std::cos(angle(pos - delta[static_cast<size_t>(g)], f))));
        c.set_q(pos, g, 2 * f + 1, static_cast<float>(2.0 * std::sin(angle(pos - delta[static_cast<size_t>(g)], f))));
      }
}

// A hot block: the chunk queries of query block qi of query head g and the keys of key block kj (g's KV head) share a
// strong direction (dimension 5).
void plant_hot_block(Chunk& c, int64_t qi, int64_t kj, int64_t g) {
  const int64_t h = g / (c.Hq / c.Hk);
  for (int64_t j = kj * c.bs; j < std::min((kj + 1) * c.bs, c.ctx); ++j) c.set_k(j, h, 5, c.kf(j, h, 5) + 4.0f);
  for (int64_t p = std::max(qi * c.bs, c.ctx - c.T); p < std::min((qi + 1) * c.bs, c.ctx); ++p)
    c.set_q(p, g, 5, c.qf(p, g, 5) + 4.0f);
}

// The picks the test's sums allow are those within kPickTolerance on bf16, 5e-2 on fp8 (bf16(code x scale) keys).
// On fp8 the planted tests plant in the bf16 keys, then quantize them.

// Vertical-slash on planted lines: the CUDA lists equal the CPU's and are what the test's sums allow within `tol`;
// returns the CUDA lists.
Lists expect_vertical_slash_matches_the_cpu(const Chunk& c, const ops::VerticalSlashParams& p, double tol,
                                            const std::string& what) {
  const auto [cpu, gpu] = run_both(c, vertical_slash_with(p), what, column_width(c, p));
  EXPECT_EQ(gpu.blocks, cpu.blocks) << what;
  EXPECT_EQ(gpu.columns, cpu.columns) << what;
  const auto [columns, diagonals] = vertical_slash_picks(c, p, tol);
  expect_plausible_vertical_slash(c, gpu, columns, diagonals, what + " (cuda)");
  return gpu;
}

// One planted column per query head (one sink column more than the forced ones, only the forced diagonals): the picks
// are separated, so the lists equal the CPU's; each planted column reaches every later query block of its KV head.
// last_q 17, 64 and 100 (fp8: 64): one partial row chunk of the score tiles, one full, two.
TEST_P(CudaPatternEstimatorsByKvDtype, VerticalSlashMatchesTheCpuOnPlantedColumns) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = by_dtype(500u, 1500u);
  for (const Case& k : cases())
    for (int64_t last_q : by_dtype<std::vector<int64_t>>({64, 17, 100}, {64})) {
      std::mt19937 rng(seed++);
      Chunk c(k.ctx, k.T, k.Hq, k.Hk, k.D, k.cache_bs, k.bs, 0.0f, rng);
      const ops::VerticalSlashParams p{
          .last_q = last_q, .vertical = 5, .slash = 8, .sink_tokens = 4, .recent_diagonals = 8};
      const int64_t span = (c.ctx - std::min(last_q, c.T) - p.sink_tokens) / c.Hq;  // columns all last rows see
      ASSERT_GE(span, 1);
      std::vector<int64_t> planted;
      for (int64_t g = 0; g < c.Hq; ++g) {
        planted.push_back(p.sink_tokens + g * span + span / 2);
        plant_column(c, planted.back(), {g});
      }
      quantize_if_fp8(c);
      const std::string what = named("vertical-slash planted columns " + describe(k, p));
      const Lists gpu = expect_vertical_slash_matches_the_cpu(c, p, by_dtype(kPickTolerance, 5e-2), what);
      for (int64_t g = 0; g < c.Hq; ++g) {
        const int64_t v = planted[static_cast<size_t>(g)], h = g / (c.Hq / c.Hk);
        for (int64_t i = std::max(c.first(), v / c.bs + 1); i < c.nqb(); ++i)
          EXPECT_TRUE(covers(c, gpu, h, i, v)) << what << ": query head " << g << " column " << v << " block " << i;
      }
    }
}

// One planted diagonal per query head (distinct in a group; one more than the forced ones, only the sink columns): the
// lists equal the CPU's, and every chunk row p of a head's KV head reaches key p - delta. last_q 64 and 100 (fp8: 64,
// seeds following the planted columns').
TEST_P(CudaPatternEstimatorsByKvDtype, VerticalSlashMatchesTheCpuOnPlantedDiagonals) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = by_dtype(600u, 1500u + static_cast<uint32_t>(kFp8Cases.size()));
  for (const Case& k : cases())
    for (int64_t last_q : by_dtype<std::vector<int64_t>>({64, 100}, {64})) {
      std::mt19937 rng(seed++);
      Chunk c(k.ctx, k.T, k.Hq, k.Hk, k.D, k.cache_bs, k.bs, 0.0f, rng);
      const ops::VerticalSlashParams p{
          .last_q = last_q, .vertical = 4, .slash = 9, .sink_tokens = 4, .recent_diagonals = 8};
      const int64_t G = c.Hq / c.Hk;
      std::vector<int64_t> delta;
      for (int64_t g = 0; g < c.Hq; ++g) delta.push_back(p.recent_diagonals + 5 + 7 * (g % G) + 3 * (g / G));
      ASSERT_LE(*std::max_element(delta.begin(), delta.end()), c.ctx - std::min(last_q, c.T));
      plant_diagonals(c, delta);
      quantize_if_fp8(c);
      const std::string what = named("vertical-slash planted diagonals " + describe(k, p));
      const Lists gpu = expect_vertical_slash_matches_the_cpu(c, p, by_dtype(kPickTolerance, 5e-2), what);
      for (int64_t g = 0; g < c.Hq; ++g) {
        const int64_t d = delta[static_cast<size_t>(g)];
        for (int64_t pos = std::max(c.ctx - c.T, d); pos < c.ctx; ++pos)
          EXPECT_TRUE(covers(c, gpu, g / G, pos / c.bs, pos - d)) << what << ": query head " << g << " row " << pos;
      }
    }
}

// Noise (and per-block offsets): near-ties among the sums may swap a pick, so both backends' lists are checked
// against what the test's double sums allow (the CPU's as a check of the checker). fp8: the first knobs, offset 2.
TEST_P(CudaPatternEstimatorsByKvDtype, VerticalSlashIsPlausibleOnNoise) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = by_dtype(700u, 1600u);
  const std::vector<ops::VerticalSlashParams> knobs = {
      {.last_q = 64, .vertical = 24, .slash = 40, .sink_tokens = 4, .recent_diagonals = 16},
      {.last_q = 100, .vertical = 60, .slash = 200, .sink_tokens = 30, .recent_diagonals = 100}};
  for (const Case& k : cases())
    for (const ops::VerticalSlashParams& p : by_dtype(knobs, {knobs.front()}))
      for (float offset : by_dtype<std::vector<float>>({0.0f, 2.0f}, {2.0f})) {
        std::mt19937 rng(seed++);
        const Chunk c = chunk(k, offset, rng);
        const std::string what =
            named("vertical-slash noise " + describe(k, p) + " offset " + std::to_string(offset));
        const auto [cpu, gpu] = run_both(c, vertical_slash_with(p), what, column_width(c, p));
        const auto [columns, diagonals] = vertical_slash_picks(c, p, by_dtype(kPickTolerance, 5e-2));
        expect_plausible_vertical_slash(c, cpu, columns, diagonals, what + " (cpu)");
        expect_plausible_vertical_slash(c, gpu, columns, diagonals, what + " (cuda)");
      }
}

// Counts covering the context pick every column and diagonal: every causal block, no columns, as the CPU.
TEST(CudaPatternEstimators, VerticalSlashCoveringCountsListEveryCausalBlock) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 800;
  for (const Case& k : kCases) {
    std::mt19937 rng(seed++);
    const Chunk c(k.ctx, k.T, k.Hq, k.Hk, k.D, k.cache_bs, k.bs, 0.0f, rng);
    const ops::VerticalSlashParams p{
        .last_q = 64, .vertical = c.ctx, .slash = c.ctx, .sink_tokens = 30, .recent_diagonals = 100};
    const std::string what = "vertical-slash covering " + describe(k, p);
    const auto [cpu, gpu] = run_both(c, vertical_slash_with(p), what, column_width(c, p));
    EXPECT_EQ(gpu.blocks, cpu.blocks) << what;
    EXPECT_EQ(gpu.columns, cpu.columns) << what;
    for (int64_t h = 0; h < c.Hk; ++h)
      for (int64_t i = c.first(); i < c.nqb(); ++i) {
        EXPECT_EQ(static_cast<int64_t>(gpu.at(c, h, i).size()), i + 1) << what << " head " << h << " block " << i;
        EXPECT_TRUE(gpu.columns_at(c, h, i).empty()) << what << " head " << h << " block " << i;
      }
  }
}

auto flexprefill_with(const ops::FlexPrefillParams& params) {
  return [params](const ops::BlockSparsePattern& p, TensorView q, const KvCacheTensor& k, const AttentionMetadata& m,
                  ops::Stream s) {
    ops::flexprefill_estimate(p, q, k, m, 1.0f / std::sqrt(static_cast<float>(q.dim(2))), params, s);
  };
}

std::string describe(const Case& k, const ops::FlexPrefillParams& p) {
  return describe(k, p.gamma) + " tau " + std::to_string(p.tau) + " min_budget " + std::to_string(p.min_budget);
}

// Per-block offsets separate the block masses (the vertical and slash blocks by the last rows' attention, the pooled
// pairs by their scores): on bf16 the lists equal the CPU's. tau 0 makes every head vertical-slash (a distance is
// never below 0), tau 10 every head query-aware (the distance is at most sqrt(ln 2)), so no decision sits at tau.
// On fp8 (gamma 0.5 and 0.9): query-aware heads (tau 10: pooled pairs from code x scale products, summed in another
// order than the CPU's and possibly fused into FMAs): a near-tie at the cover cut may land one block on the other
// side (seen on the H200: one row of 22 one block longer), so at most one block per row apart. Vertical-slash heads
// (tau 0: the last queries' attention from bf16(code x scale) keys): a cover count may end one block on the other
// side at each of the vertical and slash cuts, or swap two near-equal blocks there, so at most 4 blocks per row apart.
TEST_P(CudaPatternEstimatorsByKvDtype, FlexPrefillMatchesTheCpuOnSeparatedScores) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = by_dtype(900u, 1700u);
  for (const Case& k : cases())
    for (double tau : {0.0, 10.0})
      for (double gamma : by_dtype<std::vector<double>>({0.5, 0.9, 1.0}, {0.5, 0.9})) {
        if (gamma == 1.0 && tau > 0) continue;  // the full pattern: one tau is enough
        std::mt19937 rng(seed++);
        const Chunk c = chunk(k, 2.0f, rng);
        const ops::FlexPrefillParams p{.gamma = gamma, .tau = tau, .min_budget = 2 * k.bs};
        const std::string what = named("flexprefill " + describe(k, p));
        const auto [cpu, gpu] = run_both(c, flexprefill_with(p), what);
        const int64_t apart = fp8() ? (tau > 0 ? 1 : 4) : 0;  // blocks per row the lists may differ from the CPU's
        if (apart == 0) {
          EXPECT_EQ(gpu.blocks, cpu.blocks) << what;
        } else {
          EXPECT_LE(max_row_difference(c, cpu, gpu), apart) << what;
        }
        EXPECT_TRUE(gpu.columns_empty) << what;
        expect_valid_blocks(c, gpu, what + " (cuda)");
        if (gamma == 1.0) {
          for (int64_t h = 0; h < c.Hk; ++h)
            for (int64_t i = c.first(); i < c.nqb(); ++i)
              EXPECT_EQ(static_cast<int64_t>(gpu.at(c, h, i).size()), i + 1) << what << " block " << i;
        }
      }
}

// Noise: a near-tie may swap a vertical or slash block (at most two blocks of a row each), a cover count may end one
// token on the other side of a block boundary (one block each), a pair may swap (two): at most 6 blocks per row apart.
TEST(CudaPatternEstimators, FlexPrefillIsValidAndCloseToTheCpuOnNoise) {
  SKIP_WITHOUT_CUDA();
  uint32_t seed = 1000;
  for (const Case& k : kCases)
    for (double tau : {0.0, 0.1, 10.0}) {
      std::mt19937 rng(seed++);
      const Chunk c(k.ctx, k.T, k.Hq, k.Hk, k.D, k.cache_bs, k.bs, 0.0f, rng);
      const ops::FlexPrefillParams p{.gamma = 0.9, .tau = tau, .min_budget = k.bs};
      const std::string what = "flexprefill noise " + describe(k, p);
      const auto [cpu, gpu] = run_both(c, flexprefill_with(p), what);
      expect_valid_blocks(c, gpu, what + " (cuda)");
      EXPECT_TRUE(gpu.columns_empty) << what;
      if (tau != 0.1) {  // at 0.1 a head's branch may flip
        EXPECT_LE(max_row_difference(c, cpu, gpu), 6) << what;
      }
    }
}

// Planted structure is found on CUDA: a vertical line in both query heads of a group (vertical-slash branch: its key
// block in every later row), a diagonal (its block diagonal), a hot block of one query head (query-aware: listed).
TEST(CudaPatternEstimators, FlexPrefillFindsPlantedStructure) {
  SKIP_WITHOUT_CUDA();
  {
    std::mt19937 rng(1100);
    Chunk c(520, 520, 4, 2, 32, 16, 32, 0.0f, rng);
    plant_column(c, 200, {0, 1});  // both query heads of KV head 0
    const auto [cpu, gpu] = run_both(c, flexprefill_with({.gamma = 0.9, .tau = 0.1, .min_budget = 64}), "line");
    expect_valid_blocks(c, gpu, "flexprefill line");
    for (int64_t i = 200 / 32; i < c.nqb(); ++i)
      EXPECT_TRUE(std::binary_search(gpu.at(c, 0, i).begin(), gpu.at(c, 0, i).end(), 200 / 32)) << "line, block " << i;
  }
  {
    std::mt19937 rng(1101);
    Chunk c(448, 448, 2, 1, 32, 16, 32, 0.0f, rng);
    plant_diagonals(c, {112, 112});
    const auto [cpu, gpu] = run_both(c, flexprefill_with({.gamma = 0.9, .tau = 0.1, .min_budget = 64}), "diagonal");
    expect_valid_blocks(c, gpu, "flexprefill diagonal");
    for (int64_t i = 112 / 32; i < c.nqb(); ++i)
      EXPECT_TRUE(std::binary_search(gpu.at(c, 0, i).begin(), gpu.at(c, 0, i).end(), i - 112 / 32))
          << "diagonal, block " << i;
  }
  {
    std::mt19937 rng(1102);
    Chunk c(320, 320, 4, 2, 32, 16, 32, 0.0f, rng);
    plant_hot_block(c, 9, 3, 1);
    const auto [cpu, gpu] = run_both(c, flexprefill_with({.gamma = 0.9, .tau = 10.0, .min_budget = 32}), "hot block");
    expect_valid_blocks(c, gpu, "flexprefill hot block");
    EXPECT_TRUE(std::binary_search(gpu.at(c, 0, 9).begin(), gpu.at(c, 0, 9).end(), 3)) << str(gpu.at(c, 0, 9));
    EXPECT_LE(max_row_difference(c, cpu, gpu), 2);  // query-aware: pooled masses, the CPU's bits up to exp
  }
}

// Timing only (--gtest_also_run_disabled_tests --gtest_filter='CudaEstimatorBench.*'): one layer of a 128K-token
// prefill, Qwen3-4B heads (Hq 32, Hk 8, D 128), cache blocks of 16, pattern blocks of 128, structured data (per-block
// offsets as above, amplitude 3: pooled scores spread by ~3): each estimator's time, the density of its pattern (and
// vertical-slash's columns per row) and the block-sparse attention time on it, next to dense paged_attention. Median
// of 5 runs.
TEST(CudaEstimatorBench, DISABLED_Estimate128K) {
  SKIP_WITHOUT_CUDA();
  const int64_t L = 131072, Hq = 32, Hk = 8, D = 128, BS = 16, bs = 128, NQB = L / bs;
  std::vector<uint16_t> kv(static_cast<size_t>(L * Hk * D)), qv(static_cast<size_t>(L * Hq * D));
  uint32_t x = 12345;
  auto unit = [&] {
    x = x * 1664525u + 1013904223u;
    return static_cast<float>(x >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  };
  std::vector<float> k_off(static_cast<size_t>(NQB * Hk * D)), q_off(static_cast<size_t>(NQB * Hq * D));
  for (float& o : k_off) o = 3.0f * unit();
  for (float& o : q_off) o = 3.0f * unit();
  std::mt19937 rng(7);
  std::vector<int32_t> bt(static_cast<size_t>(L / BS)), cu{0, static_cast<int32_t>(L)}, ctx{static_cast<int32_t>(L)},
      slots(static_cast<size_t>(L));
  std::iota(bt.begin(), bt.end(), 0);
  std::shuffle(bt.begin(), bt.end(), rng);
  for (int64_t p = 0; p < L; ++p) {
    const int32_t slot = bt[static_cast<size_t>(p / BS)] * static_cast<int32_t>(BS) + static_cast<int32_t>(p % BS);
    slots[static_cast<size_t>(p)] = slot;
    for (int64_t e = 0; e < Hk * D; ++e)
      kv[static_cast<size_t>(int64_t{slot} * Hk * D + e)] =
          f32_to_bf16(unit() + k_off[static_cast<size_t>(p / bs * Hk * D + e)]);
    for (int64_t e = 0; e < Hq * D; ++e)
      qv[static_cast<size_t>(p * Hq * D + e)] = f32_to_bf16(unit() + q_off[static_cast<size_t>(p / bs * Hq * D + e)]);
  }
  const Shape cache{L / BS, BS, Hk, D}, rows{L, Hq, D};
  DeviceTensor kc(DType::kBF16, cache, kv), vc(DType::kBF16, cache, kv), q(DType::kBF16, rows, qv),
      out(DType::kBF16, rows), d_bt(DType::kI32, {1, L / BS}, bt), d_cu(DType::kI32, {2}, cu),
      d_ctx(DType::kI32, {1}, ctx), d_slots(DType::kI32, {L}, slots), bc(DType::kI32, {Hk, NQB}),
      bi(DType::kI32, {Hk, NQB, NQB});
  AttentionMetadata m;
  m.num_seqs = 1;
  m.num_tokens = L;
  m.max_query_len = L;
  m.max_context_len = L;
  m.cu_seqlens_q = d_cu.view();
  m.context_lens = d_ctx.view();
  m.block_tables = d_bt.view();
  m.slot_mapping = d_slots.view();
  m.block_size = BS;
  ops::BlockSparsePattern p;
  p.block_size = bs;
  p.block_counts = bc.view();
  p.block_index = bi.view();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  auto median_us = [&](auto&& run) {
    run();
    const std::vector<float> ms = cuda_test::time_each_ms(nullptr, 5, run);
    return 1e3 * static_cast<double>(ms[ms.size() / 2]);
  };
  const double dense_us =
      median_us([&] { ops::paged_attention(out.view(), q.view(), kc.view(), vc.view(), m, scale, on()); });
  std::printf("128K prefill, Hq 32 / Hk 8 / D 128, blocks of 128, one layer\n");
  std::printf("  dense paged_attention                      attention %9.0f us\n", dense_us);
  // Column lists for vertical-slash, as wide as the engine makes them (vertical_slash_max_columns) for the widest
  // setting below: MinferenceAdaptive's 7864 columns per query head, 4 query heads per KV head.
  const int64_t max_columns = ops::vertical_slash_max_columns(L, Hq / Hk, 7864);
  DeviceTensor cc(DType::kI32, {Hk, NQB}), ci(DType::kI32, {Hk, NQB, max_columns});
  auto report = [&](const char* name, const ops::BlockSparsePattern& pattern, auto&& estimate) {
    const double est_us = median_us(estimate);
    double listed = 0, columns = 0;
    for (int32_t n : bc.download<int32_t>()) listed += n;
    if (pattern.column_counts.defined())
      for (int32_t n : cc.download<int32_t>()) columns += n;
    const double density = listed / (static_cast<double>(Hk) * NQB * (NQB + 1) / 2);
    const double attn_us = median_us([&] {
      ops::block_sparse_prefill_attention(out.view(), q.view(), kc.view(), vc.view(), m, pattern, scale, on());
    });
    std::printf("  %-26s estimate %7.0f us  density %5.1f%% + %6.0f columns/row  attention %9.0f us  total %5.2fx "
                "dense\n",
                name, est_us, 100 * density, columns / (static_cast<double>(Hk) * NQB), attn_us,
                dense_us / (est_us + attn_us));
  };
  for (double threshold : {0.9, 0.95})
    report(("avgpool threshold " + std::to_string(threshold).substr(0, 4)).c_str(), p, [&] {
      ops::avgpool_estimate(p, q.view(), kc.view(), m, scale, {.threshold = threshold}, on());
    });
  for (double threshold : {0.9, 0.95})
    report(("xattention stride 8 thr " + std::to_string(threshold).substr(0, 4)).c_str(), p, [&] {
      ops::xattention_estimate(p, q.view(), kc.view(), m, scale, {.stride = 8, .threshold = threshold}, on());
    });
  // MInference: the seeds' fixed sizes, and the engine's adaptive default at 128K (threshold 0.3: 0.2 and 0.8 of
  // 0.3 x 131072); lists as wide as the engine's.
  const std::vector<std::pair<const char*, ops::VerticalSlashParams>> minference = {
      {"minference 1000 / 6096", {.last_q = 64, .vertical = 1000, .slash = 6096}},
      {"minference 7864 / 31457", {.last_q = 64, .vertical = 7864, .slash = 31457}}};
  for (const auto& [name, params] : minference) {
    ops::BlockSparsePattern pv = p;
    pv.column_counts = cc.view();
    pv.column_index = TensorView(ci.view().data(), DType::kI32,
                                 {Hk, NQB, ops::vertical_slash_max_columns(L, Hq / Hk, params.vertical)},
                                 ci.view().device());
    report(name, pv, [&] { ops::vertical_slash_estimate(pv, q.view(), kc.view(), m, scale, params, on()); });
  }
  for (double gamma : {0.9, 0.95})
    report(("flexprefill gamma " + std::to_string(gamma).substr(0, 4)).c_str(), p, [&] {
      ops::flexprefill_estimate(p, q.view(), kc.view(), m, scale, {.gamma = gamma, .tau = 0.1, .min_budget = 1024},
                                on());
    });
}

}  // namespace
}  // namespace nanovllm
