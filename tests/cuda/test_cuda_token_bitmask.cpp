// Structured-output token bitmasks on the GPU: the masking kernel (kernels/cuda/token_bitmask.cu) against
// its CPU reference on random logits and masks with odd vocabulary sizes (exact: it only writes -inf), and
// GpuSampler with constrained rows against the CPU Sampler (same tokens; every token inside its mask).
#include "cuda_test_util.h"

#include <cstring>
#include <limits>
#include <memory>
#include <numeric>

#include "nanovllm/engine/sampler.h"
#include "nanovllm/kernels/cpu/token_bitmask.h"
#include "nanovllm/kernels/cuda/token_bitmask.h"
#include "nanovllm/runner/cuda/gpu_sampler.h"

namespace nanovllm {
namespace {

std::vector<uint32_t> random_mask(int64_t vocab, double keep, std::mt19937& rng) {
  std::vector<uint32_t> words(static_cast<size_t>((vocab + 31) / 32), 0);
  std::bernoulli_distribution bit(keep);
  for (int64_t t = 0; t < vocab; ++t)
    if (bit(rng)) words[static_cast<size_t>(t >> 5)] |= 1u << (t & 31);
  for (int k = 0; k < 4; ++k) {  // a few allowed tokens always (finite top-3 logprobs)
    const int64_t t = static_cast<int64_t>(rng() % static_cast<uint32_t>(vocab));
    words[static_cast<size_t>(t >> 5)] |= 1u << (t & 31);
  }
  return words;
}

TEST(CudaTokenBitmask, MatchesCpuReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(5);
  for (int64_t vocab : {1, 31, 32, 33, 1000, 4097, 151936}) {
    for (int64_t rows : {1, 3, 17}) {
      const int64_t stride = vocab + 5;  // rows apart by more than the vocabulary, as padded logits may be
      std::normal_distribution<float> nd(0.0f, 2.0f);
      std::vector<float> logits(static_cast<size_t>(rows * stride));
      for (float& v : logits) v = nd(rng);
      // Masks for a random subset of the rows, in a shuffled order.
      std::vector<int32_t> order(static_cast<size_t>(rows));
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      const int64_t num_masks = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(rows));
      order.resize(static_cast<size_t>(num_masks));
      std::vector<uint32_t> masks;
      for (int64_t m = 0; m < num_masks; ++m) {
        const std::vector<uint32_t> w = random_mask(vocab, m % 2 == 0 ? 0.02 : 0.7, rng);
        masks.insert(masks.end(), w.begin(), w.end());
      }
      std::vector<float> expected = logits;
      cpu::apply_token_bitmask(expected.data(), stride, vocab, masks.data(), order.data(), num_masks);

      float* d_logits = nullptr;
      uint32_t* d_masks = nullptr;
      int32_t* d_rows = nullptr;
      CUDA_CHECK(cudaMalloc(&d_logits, logits.size() * 4));
      CUDA_CHECK(cudaMalloc(&d_masks, masks.size() * 4));
      CUDA_CHECK(cudaMalloc(&d_rows, order.size() * 4));
      CUDA_CHECK(cudaMemcpy(d_logits, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(d_masks, masks.data(), masks.size() * 4, cudaMemcpyHostToDevice));
      CUDA_CHECK(cudaMemcpy(d_rows, order.data(), order.size() * 4, cudaMemcpyHostToDevice));
      cuda_ops::apply_token_bitmask(d_logits, stride, vocab, d_masks, d_rows, num_masks, nullptr);
      std::vector<float> got(logits.size());
      CUDA_CHECK(cudaMemcpy(got.data(), d_logits, got.size() * 4, cudaMemcpyDeviceToHost));
      CUDA_CHECK(cudaFree(d_logits));
      CUDA_CHECK(cudaFree(d_masks));
      CUDA_CHECK(cudaFree(d_rows));
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(std::memcmp(&got[i], &expected[i], 4), 0)
            << "vocab " << vocab << " rows " << rows << " element " << i << ": " << got[i] << " vs " << expected[i];
    }
  }
}

// A constraint with a fixed mask (what the grammar engine would compute), counting its calls.
class FixedMask final : public TokenConstraint {
 public:
  explicit FixedMask(std::vector<uint32_t> words, bool active = true) : words_(std::move(words)), active_(active) {}
  bool fill_bitmask(uint32_t* words, int64_t vocab) override {
    EXPECT_EQ(static_cast<size_t>((vocab + 31) / 32), words_.size());
    std::copy(words_.begin(), words_.end(), words);
    ++fills;
    return active_;
  }
  bool accept(int32_t) override { return true; }
  bool is_complete() const override { return false; }
  int fills = 0;

 private:
  std::vector<uint32_t> words_;
  bool active_;
};

TEST(CudaTokenBitmask, GpuSamplerMasksConstrainedRowsLikeTheCpuSampler) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(9);
  for (int64_t vocab : {33, 1000, 151936}) {
    const int64_t S = 13;
    std::vector<Sequence> seqs(static_cast<size_t>(S));
    std::vector<std::shared_ptr<FixedMask>> constraints;
    for (int64_t i = 0; i < S; ++i) {
      Sequence& s = seqs[static_cast<size_t>(i)];
      s.seq_id = i;
      s.token_ids = {1, 2, 3};
      s.num_prompt_tokens = 2;
      s.params.temperature = i % 3 == 0 ? 0.0f : 1.0f;  // greedy and sampled rows
      s.params.logprobs = i % 4 == 0 ? 3 : 0;
      s.params.max_tokens = 100;
      s.rng_state = rng();
      if (i % 5 != 4) {  // most rows constrained; one inactive constraint (reasoning: no mask)
        auto c = std::make_shared<FixedMask>(random_mask(vocab, 0.01 + 0.1 * static_cast<double>(i % 3), rng), i != 1);
        constraints.push_back(c);
        s.constraint = c;
      }
    }
    std::vector<const Sequence*> ptrs;
    for (const Sequence& s : seqs) ptrs.push_back(&s);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> logits(static_cast<size_t>(S * vocab));
    for (float& v : logits) v = nd(rng);

    const std::vector<SampledToken> cpu = Sampler({2}).sample(logits.data(), vocab, ptrs);
    float* d_logits = nullptr;
    CUDA_CHECK(cudaMalloc(&d_logits, logits.size() * 4));
    CUDA_CHECK(cudaMemcpy(d_logits, logits.data(), logits.size() * 4, cudaMemcpyHostToDevice));
    GpuSampler gpu({2}, vocab, S);
    const std::vector<SampledToken> got = gpu.sample(ptrs, d_logits, nullptr);
    CUDA_CHECK(cudaFree(d_logits));
    ASSERT_EQ(got.size(), cpu.size());
    for (int64_t i = 0; i < S; ++i) {
      const Sequence& s = seqs[static_cast<size_t>(i)];
      EXPECT_EQ(got[i].token_id, cpu[i].token_id) << "vocab " << vocab << " row " << i;
      if (s.constraint && i != 1) {
        std::vector<uint32_t> w(static_cast<size_t>((vocab + 31) / 32));
        s.constraint->fill_bitmask(w.data(), vocab);
        EXPECT_TRUE((w[static_cast<size_t>(got[i].token_id >> 5)] >> (got[i].token_id & 31)) & 1u) << "row " << i;
      }
      ASSERT_EQ(got[i].top_logprobs.size(), cpu[i].top_logprobs.size()) << i;
      for (size_t k = 0; k < got[i].top_logprobs.size(); ++k) {
        EXPECT_EQ(got[i].top_logprobs[k].id, cpu[i].top_logprobs[k].id) << i;
        if (std::isfinite(cpu[i].top_logprobs[k].logprob)) {
          EXPECT_NEAR(got[i].top_logprobs[k].logprob, cpu[i].top_logprobs[k].logprob, 1e-4) << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace nanovllm
