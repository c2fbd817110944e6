// Tensor-parallel sharding: on random fp32 weights, every rank's share of a layer, run with the rank-local
// math and combined the way the runner will (concatenate column-parallel outputs, sum row-parallel
// partials = all-reduce, concatenate vocab shards = all-gather), gives the unsharded layer's result.
#include "nanovllm/model/tensor_parallel_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "nanovllm/core/error.h"

using namespace nanovllm;

namespace {

using Vec = std::vector<float>;

// The rank's tensor size in elements for a full [rows, cols] tensor.
int64_t shard_numel(const ShardSlice& slice, int64_t rows, int64_t cols) {
  switch (slice.axis) {
    case ShardSlice::Axis::kRows: return slice.extent() * cols;
    case ShardSlice::Axis::kColumns: return rows * slice.extent();
    default: return rows * cols;
  }
}

// `slice` of a row-major [rows, cols] tensor of `elem_bytes`-sized elements into `dst` by shard_runs (what
// the loader follows), the padding rows zeroed.
void copy_shard(const ShardSlice& slice, const void* src, int64_t rows, int64_t cols, int64_t elem_bytes, void* dst) {
  const auto* s = static_cast<const char*>(src);
  auto* o = static_cast<char*>(dst);
  const std::vector<ElementRun> runs = shard_runs(slice, rows, cols);
  for (const ElementRun& r : runs)
    std::memcpy(o + r.dst * elem_bytes, s + r.src * elem_bytes, static_cast<size_t>(r.count * elem_bytes));
  const int64_t copied = runs.empty() ? 0 : runs.back().dst + runs.back().count;
  std::memset(o + copied * elem_bytes, 0, static_cast<size_t>((shard_numel(slice, rows, cols) - copied) * elem_bytes));
}

ModelConfig tiny_config(int64_t hq, int64_t hk, int64_t vocab) {
  ModelConfig c;
  c.hidden_size = 10;
  c.num_attention_heads = hq;
  c.num_key_value_heads = hk;
  c.head_dim = 3;
  c.intermediate_size = 24;
  c.vocab_size = vocab;
  return c;
}

Vec random_vec(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Vec v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// y[out] = W[out, in] x[in]
Vec matvec(const Vec& w, const Vec& x, int64_t out, int64_t in) {
  Vec y(static_cast<size_t>(out), 0.f);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) y[o] += w[o * in + i] * x[i];
  return y;
}

Vec shard(const ShardSlice& s, const Vec& full, int64_t rows, int64_t cols) {
  Vec out(static_cast<size_t>(shard_numel(s, rows, cols)));
  copy_shard(s, full.data(), rows, cols, sizeof(float), out.data());
  return out;
}

void expect_near(const Vec& got, const Vec& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << what << " [" << i << "]";
}

std::string expect_error(const ModelConfig& c, int64_t n) {
  try {
    validate_tensor_parallel(c, n);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for tensor_parallel_size " << n;
  return "";
}

// Attention stand-in that depends on the q-head -> kv-head pairing: out[head] = q[head] * (k + v)[kv(head)].
Vec fake_attention(const Vec& qkv, int64_t hq, int64_t hk, int64_t d) {
  Vec out(static_cast<size_t>(hq * d));
  for (int64_t h = 0; h < hq; ++h) {
    const int64_t kv = h / (hq / hk);
    for (int64_t e = 0; e < d; ++e)
      out[h * d + e] = qkv[h * d + e] * (qkv[(hq + kv) * d + e] + qkv[(hq + hk + kv) * d + e]);
  }
  return out;
}

}  // namespace

TEST(TensorParallelPlan, RejectsSplitsNamingFieldAndValues) {
  const ModelConfig c = tiny_config(6, 3, 17);
  EXPECT_NE(expect_error(c, 0).find("must be >= 1, got 0"), std::string::npos);
  EXPECT_NE(expect_error(c, 4).find("does not divide num_attention_heads 6"), std::string::npos);
  EXPECT_NE(expect_error(c, 2).find("num_key_value_heads 3"), std::string::npos);  // 2 and 3: neither divides
  ModelConfig odd_mlp = tiny_config(6, 3, 17);
  odd_mlp.intermediate_size = 25;
  EXPECT_NE(expect_error(odd_mlp, 3).find("does not divide intermediate_size 25"), std::string::npos);
  EXPECT_THROW(shard_for_rank(c, 3, 3), Error);  // rank out of range
  EXPECT_THROW(shard_for_rank(c, -1, 3), Error);
  EXPECT_NO_THROW(validate_tensor_parallel(c, 3));
  EXPECT_NO_THROW(validate_tensor_parallel(c, 6));  // KV heads replicated: 3 divides 6
}

TEST(TensorParallelPlan, KvHeadsSplitOrReplicatedWithGqaGroupsIntact) {
  for (int64_t n : {1, 2, 4, 8}) {
    const ModelConfig c = tiny_config(8, 2, 17);
    for (int64_t r = 0; r < n; ++r) {
      const TensorParallelPlan p = shard_for_rank(c, r, n);
      EXPECT_EQ(p.num_heads, 8 / n);
      EXPECT_EQ(p.num_kv_heads, n <= 2 ? 2 / n : 1) << "n=" << n;
      // Every local query head's local KV head (local GQA grouping) is its global group's KV head.
      for (int64_t j = 0; j < p.num_heads; ++j)
        EXPECT_EQ(p.kv_head_begin + j / (p.num_heads / p.num_kv_heads), (p.q_head_begin + j) / 4)
            << "n=" << n << " rank=" << r << " head=" << j;
    }
  }
}

// qkv (column-parallel) -> attention per local head -> o_proj (row-parallel, bias once): the sum over
// ranks equals the unsharded block, for split (N | Hk) and replicated (Hk | N) KV heads.
TEST(TensorParallelPlan, AttentionBlockSumsToUnsharded) {
  std::mt19937 rng(34);
  for (auto [hq, hk] : {std::pair<int64_t, int64_t>{8, 2}, {8, 8}, {4, 1}, {8, 4}}) {
    const ModelConfig c = tiny_config(hq, hk, 17);
    const int64_t h = c.hidden_size, d = c.head_dim, qkv_rows = (hq + 2 * hk) * d;
    const Vec x = random_vec(h, rng), w_qkv = random_vec(qkv_rows * h, rng), b_qkv = random_vec(qkv_rows, rng);
    const Vec w_o = random_vec(h * hq * d, rng), b_o = random_vec(h, rng);
    Vec qkv = matvec(w_qkv, x, qkv_rows, h);
    for (int64_t i = 0; i < qkv_rows; ++i) qkv[i] += b_qkv[i];
    Vec want = matvec(w_o, fake_attention(qkv, hq, hk, d), h, hq * d);
    for (int64_t i = 0; i < h; ++i) want[i] += b_o[i];

    for (int64_t n = 1; n <= hq; n *= 2) {
      Vec sum(static_cast<size_t>(h), 0.f);
      for (int64_t r = 0; r < n; ++r) {
        const TensorParallelPlan p = shard_for_rank(c, r, n);
        const int64_t rows = p.qkv_proj.extent();
        ASSERT_EQ(rows, (p.num_heads + 2 * p.num_kv_heads) * d);
        Vec local = matvec(shard(p.qkv_proj, w_qkv, qkv_rows, h), x, rows, h);
        const Vec bias = shard(p.qkv_bias, b_qkv, qkv_rows, 1);
        for (int64_t i = 0; i < rows; ++i) local[i] += bias[i];
        const Vec attn = fake_attention(local, p.num_heads, p.num_kv_heads, d);
        ASSERT_EQ(p.o_proj.extent(), p.num_heads * d);
        const Vec part = matvec(shard(p.o_proj, w_o, h, hq * d), attn, h, p.num_heads * d);
        for (int64_t i = 0; i < h; ++i) sum[i] += part[i] + (p.rank == 0 ? b_o[i] : 0.f);  // all-reduce
      }
      expect_near(sum, want, "attention hq=" + std::to_string(hq) + " hk=" + std::to_string(hk) +
                                 " n=" + std::to_string(n));
    }
  }
}

// gate_up (column-parallel, gate and up rows re-fused per rank) -> SiLU(gate) * up -> down (row-parallel).
TEST(TensorParallelPlan, MlpSumsToUnsharded) {
  std::mt19937 rng(35);
  const ModelConfig c = tiny_config(24, 24, 17);  // 24 heads and intermediate 24: every n below splits
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  const Vec x = random_vec(h, rng), w_gu = random_vec(2 * i * h, rng), w_down = random_vec(h * i, rng);
  auto silu_mul = [](const Vec& gu, int64_t inter) {
    Vec a(static_cast<size_t>(inter));
    for (int64_t k = 0; k < inter; ++k) a[k] = gu[k] / (1.f + std::exp(-gu[k])) * gu[inter + k];
    return a;
  };
  const Vec want = matvec(w_down, silu_mul(matvec(w_gu, x, 2 * i, h), i), h, i);
  for (int64_t n : {1, 2, 3, 4, 6, 8}) {
    Vec sum(static_cast<size_t>(h), 0.f);
    for (int64_t r = 0; r < n; ++r) {
      const TensorParallelPlan p = shard_for_rank(c, r, n);
      ASSERT_EQ(p.gate_up_proj.extent(), 2 * p.intermediate);
      const Vec gu = matvec(shard(p.gate_up_proj, w_gu, 2 * i, h), x, 2 * p.intermediate, h);
      const Vec part = matvec(shard(p.down_proj, w_down, h, i), silu_mul(gu, p.intermediate), h, p.intermediate);
      for (int64_t k = 0; k < h; ++k) sum[k] += part[k];
    }
    expect_near(sum, want, "mlp n=" + std::to_string(n));
  }
}

// Vocab-parallel embedding (rank-local lookup, zeros for ids outside the rank's rows, then all-reduce)
// and LM head (rank-local logits, all-gather, padding dropped) on a vocabulary no N divides.
TEST(TensorParallelPlan, VocabParallelEmbeddingAndLmHeadWithPaddedVocab) {
  std::mt19937 rng(36);
  const int64_t v = 17;
  const ModelConfig c = tiny_config(24, 24, v);  // 24 heads: n = 1..4, 6, 8 all split
  const int64_t h = c.hidden_size;
  const Vec table = random_vec(v * h, rng), hidden = random_vec(h, rng);
  const Vec want_logits = matvec(table, hidden, v, h);
  for (int64_t n : {1, 2, 3, 4, 6, 8}) {
    Vec gathered;
    int64_t covered = 0;
    std::vector<TensorParallelPlan> plans;
    for (int64_t r = 0; r < n; ++r) plans.push_back(shard_for_rank(c, r, n));
    for (const TensorParallelPlan& p : plans) {
      ASSERT_EQ(p.embed_tokens.extent(), p.vocab_per_rank);
      ASSERT_EQ(p.vocab.begin, std::min(v, p.rank * p.vocab_per_rank));
      covered += p.vocab.size();
      const Vec local = shard(p.lm_head, table, v, h);
      for (int64_t row = p.vocab.size(); row < p.vocab_per_rank; ++row)
        for (int64_t k = 0; k < h; ++k) EXPECT_EQ(local[row * h + k], 0.f) << "padding row " << row;
      const Vec logits = matvec(local, hidden, p.vocab_per_rank, h);
      gathered.insert(gathered.end(), logits.begin(), logits.end());
    }
    EXPECT_EQ(covered, v);
    ASSERT_EQ(static_cast<int64_t>(gathered.size()), n * plans[0].vocab_per_rank);
    gathered.resize(v);  // the padded tail is not a token
    expect_near(gathered, want_logits, "lm_head n=" + std::to_string(n));

    for (int64_t id : {int64_t{0}, int64_t{5}, v - 1}) {
      Vec sum(static_cast<size_t>(h), 0.f);
      for (const TensorParallelPlan& p : plans) {
        if (id < p.vocab.begin || id >= p.vocab.end) continue;  // this rank contributes zeros
        const Vec local = shard(p.embed_tokens, table, v, h);
        for (int64_t k = 0; k < h; ++k) sum[k] += local[(id - p.vocab.begin) * h + k];
      }
      expect_near(sum, Vec(table.begin() + id * h, table.begin() + (id + 1) * h), "embed id=" + std::to_string(id));
    }
  }
}

TEST(TensorParallelPlan, CopyShardAnyElementSizeAndRangeChecks) {
  // 2-byte elements (bf16 at load): columns 1..2 and 4 of a [2, 5] tensor.
  const std::vector<uint16_t> src = {0, 1, 2, 3, 4, 10, 11, 12, 13, 14};
  const ShardSlice cols{ShardSlice::Axis::kColumns, {{1, 3}, {4, 5}}};
  std::vector<uint16_t> dst(static_cast<size_t>(shard_numel(cols, 2, 5)));
  copy_shard(cols, src.data(), 2, 5, 2, dst.data());
  EXPECT_EQ(dst, (std::vector<uint16_t>{1, 2, 4, 11, 12, 14}));
  const ShardSlice bad{ShardSlice::Axis::kRows, {{1, 3}}};
  EXPECT_THROW(copy_shard(bad, src.data(), 2, 5, 2, dst.data()), Error);
}
