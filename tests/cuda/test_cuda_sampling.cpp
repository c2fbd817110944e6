// GpuSampler (kernels/cuda/sampling.cu) against the CPU Sampler on identical logits, sequences and RNG
// keys: every option alone and combined (logit_bias included), ties, -inf, vocab sizes 1, 17, 1000 and 151936.
//
// Chosen ids must be identical. The only allowed difference: the GPU sums probabilities in another order
// (and with fixed-point mass for top-p), so when the draw u (or the top-p target) lies within 1e-6 (relative
// to the mass) of a cumulative-probability boundary the two may land on neighbouring tokens. Such rows are
// detected with an independent long-double re-computation of the distances and allowed (and counted).
// Logprob lists: same ids in the same order, values within 1e-4.
#include "cuda_test_util.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>

#include "nanovllm/core/rng.h"
#include "nanovllm/engine/sampler.h"
#include "nanovllm/kernels/cuda/sampling.h"
#include "nanovllm/runner/cuda/gpu_sampler.h"

namespace nanovllm {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
const std::vector<int64_t> kEos = {2, 7};

enum class LogitKind { kNormal, kTies, kSomeNegInf, kAllEqual, kPeaky, kOneFinite, kAllNegInf };

std::vector<float> make_logits(int64_t V, LogitKind kind, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(V));
  for (auto& v : x) v = nd(rng);
  switch (kind) {
    case LogitKind::kNormal: break;
    case LogitKind::kTies:  // multiples of 0.5: many exact ties, incl. at the maximum
      for (auto& v : x) v = std::round(v) * 0.5f;
      break;
    case LogitKind::kSomeNegInf:
      for (auto& v : x)
        if (rng() % 10 == 0) v = kNegInf;
      break;
    case LogitKind::kAllEqual: std::fill(x.begin(), x.end(), 0.25f); break;
    case LogitKind::kPeaky:  // LLM-like: a few dominant tokens
      for (auto& v : x) v *= 0.5f;
      for (int i = 0; i < 5; ++i) x[rng() % V] = 8.0f + static_cast<float>(i);
      break;
    case LogitKind::kOneFinite:
      std::fill(x.begin(), x.end(), kNegInf);
      x[rng() % V] = 1.5f;
      break;
    case LogitKind::kAllNegInf: std::fill(x.begin(), x.end(), kNegInf); break;
  }
  return x;
}

SamplingParams sp(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.max_tokens = 1000;
  return p;
}

// Every option alone, then combinations.
std::vector<SamplingParams> all_cases() {
  std::vector<SamplingParams> c;
  auto add = [&](SamplingParams p) { c.push_back(p); };
  add(sp(0.0f));
  { auto p = sp(0.0f); p.logprobs = 5; add(p); }
  { auto p = sp(0.0f); p.repetition_penalty = 1.5f; p.frequency_penalty = 0.4f; p.presence_penalty = 0.3f; add(p); }
  { auto p = sp(0.0f); p.min_tokens = 100; p.stop_token_ids = {0, 3}; p.logprobs = 20; add(p); }
  add(sp(1.0f));
  { auto p = sp(0.7f); p.top_k = 1; add(p); }
  { auto p = sp(0.7f); p.top_k = 5; add(p); }
  { auto p = sp(1.3f); p.top_k = 50; add(p); }
  { auto p = sp(0.8f); p.top_p = 0.9f; add(p); }
  { auto p = sp(1.0f); p.top_p = 0.5f; add(p); }
  { auto p = sp(1.0f); p.top_p = 0.05f; add(p); }
  { auto p = sp(1.0f); p.top_p = 0.3f; add(p); }
  { auto p = sp(1.0f); p.min_p = 0.1f; add(p); }
  { auto p = sp(1.0f); p.min_p = 0.5f; add(p); }
  { auto p = sp(0.9f); p.repetition_penalty = 1.3f; add(p); }
  { auto p = sp(0.9f); p.repetition_penalty = 0.8f; p.frequency_penalty = -0.5f; p.presence_penalty = 0.7f; add(p); }
  { auto p = sp(0.9f); p.frequency_penalty = 1.5f; p.presence_penalty = -1.0f; add(p); }
  { auto p = sp(1.0f); p.min_tokens = 100; p.stop_token_ids = {0, 3}; add(p); }
  { auto p = sp(1.0f); p.min_tokens = 100; p.ignore_eos = true; p.stop_token_ids = {1}; add(p); }
  { auto p = sp(1.0f); p.logprobs = 1; add(p); }
  { auto p = sp(0.6f); p.logprobs = 20; add(p); }
  { auto p = sp(0.5f); p.top_k = 20; p.top_p = 0.8f; add(p); }
  { auto p = sp(1.1f); p.top_p = 0.95f; p.min_p = 0.02f; add(p); }
  { auto p = sp(0.8f); p.top_k = 40; p.top_p = 0.92f; p.min_p = 0.05f; p.repetition_penalty = 1.1f;
    p.frequency_penalty = 0.2f; p.presence_penalty = 0.1f; p.logprobs = 5; p.min_tokens = 100;
    p.stop_token_ids = {0, 3}; add(p); }
  { auto p = sp(2.0f); p.top_k = 3; p.repetition_penalty = 2.0f; p.logprobs = 3; add(p); }
  // logit_bias (ids reduced modulo the vocab by make_seq): alone, greedy and sampled, a ban, a zero bias,
  // on ids of the history with penalties (ids < 60 are seen tokens), and on a suppressed stop id.
  { auto p = sp(0.0f); p.logit_bias = {{5, 100.0f}}; add(p); }
  { auto p = sp(0.0f); p.logit_bias = {{1, -100.0f}, {2, 3.5f}, {4, 0.0f}, {900, 7.25f}}; p.logprobs = 3; add(p); }
  { auto p = sp(1.0f); p.logit_bias = {{3, 5.0f}, {10, -100.0f}, {11, 2.5f}, {40, -0.5f}, {700, 1.0f}}; add(p); }
  { auto p = sp(0.8f); p.top_k = 20; p.top_p = 0.9f; p.logit_bias = {{0, 1.5f}, {7, -2.0f}, {65, 4.0f}}; add(p); }
  { auto p = sp(0.9f); p.repetition_penalty = 1.3f; p.frequency_penalty = 0.5f; p.presence_penalty = -0.25f;
    p.logit_bias = {{1, 2.0f}, {2, -3.0f}, {30, 0.75f}, {61, -1.5f}, {150, 6.0f}}; add(p); }
  { auto p = sp(1.0f); p.min_tokens = 100; p.stop_token_ids = {0, 3}; p.logit_bias = {{0, 100.0f}, {3, 50.0f},
    {2, 100.0f}, {8, 9.0f}}; add(p); }
  return c;
}

// A sequence with a prompt and some output tokens drawn from a small id range (repeats: counts > 1).
Sequence make_seq(int64_t id, int64_t V, const SamplingParams& p, std::mt19937& rng) {
  Sequence s;
  s.seq_id = id;
  s.params = p;
  const int64_t range = std::min<int64_t>(V, 60);
  const int64_t prompt = 1 + static_cast<int64_t>(rng() % 30), out = static_cast<int64_t>(rng() % 12);
  for (int64_t i = 0; i < prompt + out; ++i) s.token_ids.push_back(static_cast<int32_t>(rng() % range));
  s.num_prompt_tokens = prompt;
  for (auto& t : s.params.stop_token_ids) t %= V;
  std::map<int32_t, float> bias;  // ids modulo V (the first of colliding ids wins)
  for (const auto& [id, b] : s.params.logit_bias) bias.emplace(static_cast<int32_t>(id % V), b);
  s.params.logit_bias = bias;
  s.rng_state = (static_cast<uint64_t>(rng()) << 32) ^ rng();
  return s;
}

// Independent long-double re-computation of the CPU semantics: the smallest relative distance between
// the draw (or the top-p target) and a cumulative-probability boundary. +inf for greedy rows.
double straddle_margin(const float* raw, int64_t V, const Sequence& seq) {
  const SamplingParams& p = seq.params;
  if (p.temperature < 1e-5f) return std::numeric_limits<double>::infinity();
  std::vector<float> x(raw, raw + V);
  const int64_t num_out = seq.num_output_tokens();
  if (num_out < p.min_tokens) {
    for (int64_t id : p.stop_token_ids) x[id] = kNegInf;
    if (!p.ignore_eos)
      for (int64_t id : kEos)
        if (id < V) x[id] = kNegInf;
  }
  for (const auto& [id, b] : p.logit_bias)
    if (b != 0.0f) x[id] += b;
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(static_cast<size_t>(V));
    for (int32_t id : seq.token_ids) seen[id] = true;
    for (int64_t id = 0; id < V; ++id)
      if (seen[id]) x[id] = x[id] > 0 ? x[id] / p.repetition_penalty : x[id] * p.repetition_penalty;
  }
  std::vector<int64_t> cnt(static_cast<size_t>(V));
  for (int64_t i = seq.num_prompt_tokens; i < seq.num_tokens(); ++i) ++cnt[seq.token_ids[i]];
  for (int64_t id = 0; id < V; ++id)
    if (cnt[id] > 0) x[id] -= p.frequency_penalty * static_cast<float>(cnt[id]) + p.presence_penalty;
  for (auto& v : x) v /= p.temperature;
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < V; ++i)
    if (x[i] != kNegInf) keep.push_back(i);
  if (keep.empty()) return std::numeric_limits<double>::infinity();
  if (p.top_k > 0 && p.top_k < static_cast<int64_t>(keep.size())) {
    std::vector<float> vals;
    for (int64_t id : keep) vals.push_back(x[id]);
    std::sort(vals.begin(), vals.end(), std::greater<float>());
    const float kth = vals[p.top_k - 1];
    std::erase_if(keep, [&](int64_t id) { return x[id] < kth; });
  }
  float m = kNegInf;
  for (int64_t id : keep) m = std::max(m, x[id]);
  std::vector<long double> prob(static_cast<size_t>(V), 0.0L);
  long double total = 0;
  for (int64_t id : keep) total += prob[id] = std::exp(static_cast<long double>(x[id]) - m);
  double margin = std::numeric_limits<double>::infinity();
  if (p.top_p < 1.0f) {
    std::sort(keep.begin(), keep.end(),
              [&](int64_t a, int64_t b) { return prob[a] > prob[b] || (prob[a] == prob[b] && a < b); });
    const long double target = static_cast<long double>(p.top_p) * total;
    long double cum = 0;
    size_t i = 0;
    while (i < keep.size() && cum < target) cum += prob[keep[i++]];
    const size_t cut = std::max<size_t>(i, 1);
    long double at = 0;
    for (size_t j = 0; j < cut; ++j) at += prob[keep[j]];
    const long double before = at - prob[keep[cut - 1]];
    margin = static_cast<double>(std::min(std::fabs(at - target), std::fabs(before - target)) / total);
    keep.resize(cut);
  }
  if (p.min_p > 0.0f) std::erase_if(keep, [&](int64_t id) { return prob[id] < static_cast<long double>(p.min_p); });
  std::sort(keep.begin(), keep.end());
  long double kept = 0;
  for (int64_t id : keep) kept += prob[id];
  const long double r = rng_uniform(seq.rng_state, num_out);
  long double cum = 0;
  for (int64_t id : keep) {
    cum += prob[id];
    margin = std::min(margin, static_cast<double>(std::fabs(cum / kept - r)));
  }
  return margin;
}

class DeviceLogits {
 public:
  explicit DeviceLogits(const std::vector<float>& h) {
    CUDA_CHECK(cudaMalloc(&p_, h.size() * 4));
    CUDA_CHECK(cudaMemcpy(p_, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
    n_ = h.size();
  }
  ~DeviceLogits() { cudaFree(p_); }
  float* get() const { return p_; }
  std::vector<float> download() const {
    std::vector<float> h(n_);
    CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * 4, cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  float* p_ = nullptr;
  size_t n_ = 0;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Samples rows (row i: logits[i], seqs[i]) on both samplers and compares; returns the allowed straddles.
int compare_rows(int64_t V, const std::vector<float>& logits, const std::vector<Sequence>& seqs,
                 const std::string& what) {
  std::vector<const Sequence*> ptrs;
  for (const auto& s : seqs) ptrs.push_back(&s);
  DeviceLogits d(logits);
  GpuSampler gpu_sampler(kEos, V, 4);  // fewer rows than the batch: the buffers must grow
  const std::vector<SampledToken> gpu = gpu_sampler.sample(ptrs, d.get(), nullptr);
  const std::vector<SampledToken> cpu = Sampler(kEos).sample(logits.data(), V, ptrs);
  EXPECT_TRUE(same_bits(d.download(), logits)) << what << ": the device logits were not restored";
  EXPECT_EQ(gpu.size(), cpu.size());
  // The device copy the next step's inputs are fed from holds the same ids.
  std::vector<int32_t> device_ids(gpu.size());
  CUDA_CHECK(cudaMemcpy(device_ids.data(), gpu_sampler.device_token_ids(), device_ids.size() * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < gpu.size(); ++i) EXPECT_EQ(device_ids[i], gpu[i].token_id) << what << " row " << i << ": device id";
  int allowed = 0;
  for (size_t i = 0; i < seqs.size() && i < gpu.size(); ++i) {
    const std::string row = what + " row " + std::to_string(i) + " (T=" + std::to_string(seqs[i].params.temperature) +
                            " top_k=" + std::to_string(seqs[i].params.top_k) + " top_p=" +
                            std::to_string(seqs[i].params.top_p) + " min_p=" + std::to_string(seqs[i].params.min_p) + ")";
    EXPECT_EQ(gpu[i].seq_id, cpu[i].seq_id) << row;
    if (gpu[i].token_id < 0 || gpu[i].token_id >= V) {
      ADD_FAILURE() << row << ": token " << gpu[i].token_id << " outside the vocabulary";
      continue;
    }
    const bool same = gpu[i].token_id == cpu[i].token_id;
    if (!same) {
      const double margin = straddle_margin(logits.data() + i * V, V, seqs[i]);
      EXPECT_LT(margin, 1e-6) << row << ": gpu token " << gpu[i].token_id << " cpu token " << cpu[i].token_id;
      ++allowed;
    }
    const auto& g = gpu[i].top_logprobs;
    const auto& c = cpu[i].top_logprobs;
    const size_t k = static_cast<size_t>(std::min<int64_t>(seqs[i].params.logprobs, V));
    if (same ? g.size() != c.size() : (g.size() < k || c.size() < k)) {
      ADD_FAILURE() << row << ": " << g.size() << " gpu logprobs vs " << c.size() << " cpu (k=" << k << ")";
      continue;
    }
    for (size_t j = 0; j < (same ? g.size() : k); ++j) {
      EXPECT_EQ(g[j].id, c[j].id) << row << " logprob entry " << j;
      if (std::isnan(c[j].logprob)) {  // all-(-inf) row: -inf - (-inf) on both
        EXPECT_TRUE(std::isnan(g[j].logprob)) << row << " logprob entry " << j;
      } else if (std::isinf(c[j].logprob)) {
        EXPECT_EQ(g[j].logprob, c[j].logprob) << row << " logprob entry " << j;
      } else {
        EXPECT_NEAR(g[j].logprob, c[j].logprob, 1e-4) << row << " logprob entry " << j;
      }
    }
  }
  return allowed;
}

void run_vocab(int64_t V, int reps, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<SamplingParams> cases = all_cases();
  const LogitKind kinds[] = {LogitKind::kNormal, LogitKind::kTies, LogitKind::kSomeNegInf, LogitKind::kAllEqual,
                             LogitKind::kPeaky, LogitKind::kOneFinite, LogitKind::kAllNegInf};
  int allowed = 0, rows = 0;
  for (int rep = 0; rep < reps; ++rep) {
    for (LogitKind kind : kinds) {
      std::vector<Sequence> seqs;
      std::vector<float> logits;
      for (size_t c = 0; c < cases.size(); ++c) {
        seqs.push_back(make_seq(static_cast<int64_t>(c), V, cases[c], rng));
        const std::vector<float> row = make_logits(V, kind, rng);
        logits.insert(logits.end(), row.begin(), row.end());
      }
      allowed += compare_rows(V, logits, seqs,
                              "V=" + std::to_string(V) + " kind=" + std::to_string(static_cast<int>(kind)));
      rows += static_cast<int>(seqs.size());
    }
  }
  // Straddles are rare: the distance to a boundary is below 1e-6 with probability ~1e-6 per boundary.
  EXPECT_LE(allowed, std::max(1, rows / 100)) << "V=" << V << ": too many straddle differences";
  std::printf("V=%lld: %d rows, %d allowed straddle differences\n", static_cast<long long>(V), rows, allowed);
}

TEST(CudaSampling, MatchesCpuSamplerVocab1) { SKIP_WITHOUT_CUDA(); run_vocab(1, 2, 11); }
TEST(CudaSampling, MatchesCpuSamplerVocab17) { SKIP_WITHOUT_CUDA(); run_vocab(17, 6, 12); }
TEST(CudaSampling, MatchesCpuSamplerVocab1000) { SKIP_WITHOUT_CUDA(); run_vocab(1000, 4, 13); }
TEST(CudaSampling, MatchesCpuSamplerVocab151936) { SKIP_WITHOUT_CUDA(); run_vocab(151936, 1, 14); }
// Above 262,144 ids the draw's segments span several 128-id steps (walked step by step).
TEST(CudaSampling, MatchesCpuSamplerVocab300001) { SKIP_WITHOUT_CUDA(); run_vocab(300001, 1, 15); }

// Many steps of one seeded request: the GPU reproduces the CPU's draws step after step (the counter-based
// RNG evaluated on the device), on a vocab whose rows are not 16-byte aligned.
TEST(CudaSampling, SeededStepsMatchCpu) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(21);
  const int64_t V = 1001;
  auto p = sp(1.0f);
  p.top_p = 0.97f;
  std::vector<Sequence> seqs;
  std::vector<float> logits;
  for (int step = 0; step < 64; ++step) {
    Sequence s = make_seq(step, V, p, rng);
    s.rng_state = rng_key_from_seed(1234);
    s.token_ids.resize(static_cast<size_t>(s.num_prompt_tokens));
    for (int t = 0; t < step; ++t) s.token_ids.push_back(static_cast<int32_t>(rng() % V));
    seqs.push_back(std::move(s));
    const auto row = make_logits(V, LogitKind::kNormal, rng);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  EXPECT_LE(compare_rows(V, logits, seqs, "seeded steps"), 1);
}

// A token id outside the vocabulary in a penalised history is a user error, as on the CPU.
TEST(CudaSampling, RejectsOutOfVocabHistory) {
  SKIP_WITHOUT_CUDA();
  const int64_t V = 100;
  auto p = sp(1.0f);
  p.repetition_penalty = 1.2f;
  Sequence s;
  s.params = p;
  s.token_ids = {1, 2, 150};
  s.num_prompt_tokens = 3;
  std::vector<float> logits(V, 0.0f);
  DeviceLogits d(logits);
  GpuSampler g(kEos, V, 1);
  EXPECT_THROW(g.sample({&s}, d.get(), nullptr), Error);
}

// logit_bias at scale: up to 300 random biases in [-100, 100] per row (OpenAI's limit), over the whole
// vocabulary or the history's ids, on greedy, seeded temperature and filtered rows, with and without
// penalties, on normal and tied logits: the same tokens and logprobs as the CPU sampler.
TEST(CudaSampling, LogitBiasMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(31);
  for (const int64_t V : {17, 1000, 151936}) {
    std::vector<Sequence> seqs;
    std::vector<float> logits;
    for (int row = 0; row < 48; ++row) {
      SamplingParams p = sp(row % 4 == 0 ? 0.0f : 0.5f + 0.25f * static_cast<float>(row % 5));
      if (row % 3 == 1) { p.top_k = 30; p.top_p = 0.9f; }
      if (row % 6 == 2) { p.repetition_penalty = 1.2f; p.frequency_penalty = 0.3f; p.presence_penalty = 0.2f; }
      if (row % 8 == 5) p.logprobs = 4;
      const int n = static_cast<int>(rng() % 301);
      std::uniform_real_distribution<float> bias(-100.0f, 100.0f);
      for (int i = 0; i < n; ++i) {
        // Half the ids from the history's range (seen tokens, penalised), half anywhere.
        const int64_t id = i % 2 == 0 ? static_cast<int64_t>(rng() % 60) : static_cast<int64_t>(rng() % V);
        p.logit_bias[static_cast<int32_t>(id % V)] = i % 7 == 0 ? std::round(bias(rng)) : bias(rng);
      }
      Sequence s = make_seq(row, V, p, rng);
      s.rng_state = rng_key_from_seed(static_cast<uint64_t>(row));
      seqs.push_back(std::move(s));
      const auto l = make_logits(V, row % 5 == 3 ? LogitKind::kTies : LogitKind::kNormal, rng);
      logits.insert(logits.end(), l.begin(), l.end());
    }
    EXPECT_LE(compare_rows(V, logits, seqs, "logit_bias V=" + std::to_string(V)), 1);
  }
}

// The chunk pass (scratch given: raw statistics of every row, and the whole draw of greedy and plain
// temperature rows) against the one-CTA kernel alone (no scratch) on the same rows: token ids and top-K
// ids identical (the weight sums differ only in fp64 order), logprobs within 1e-5 (the log-sum-exp's fp32
// order and __expf). With 5 logprobs every row also runs the one-CTA kernel after the chunk pass; with
// none only the top-p rows do. The chunked call runs twice on the same scratch (its arrival counters
// must be reset) and then on the first half of the rows (the scratch layout must not depend on the row
// count), both with identical results.
// Vocab 4097: a last chunk of one logit; 10001: rows not 16-byte aligned; 151936: the real vocab.
TEST(CudaSampling, ChunkPassMatchesOneCtaPass) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(31);
  const LogitKind kinds[] = {LogitKind::kNormal, LogitKind::kTies, LogitKind::kSomeNegInf, LogitKind::kAllEqual,
                             LogitKind::kPeaky, LogitKind::kOneFinite, LogitKind::kAllNegInf};
  for (const int64_t V : {4097, 10001, 151936}) {
    for (const int32_t num_logprobs : {5, 0}) {
      std::vector<float> logits;
      std::vector<cuda_ops::GpuSamplingParams> hp;
      for (const LogitKind kind : kinds) {
        for (const auto& [T, top_p] : {std::pair{0.0f, 1.0f}, {0.8f, 0.9f}, {0.8f, 1.0f}, {1.7f, 1.0f}}) {
          const auto row = make_logits(V, kind, rng);
          logits.insert(logits.end(), row.begin(), row.end());
          hp.push_back({T, 0, top_p, 0.0f, 1.0f, 0.0f, 0.0f, num_logprobs, rng(), 3, 0, 0});
        }
      }
      const int64_t S = static_cast<int64_t>(hp.size());
      const std::string what = "V=" + std::to_string(V) + " logprobs=" + std::to_string(num_logprobs);
      DeviceLogits d(logits);
      cuda_ops::GpuSamplingParams* dp;
      const size_t out_bytes = cuda_ops::sample_output_words(S) * 4;
      const size_t scratch_bytes = cuda_ops::sample_scratch_bytes(S, V);
      void *out_one_cta, *out_chunked, *out_again, *out_half, *scratch;
      CUDA_CHECK(cudaMalloc(&dp, hp.size() * sizeof(hp[0])));
      CUDA_CHECK(cudaMemcpy(dp, hp.data(), hp.size() * sizeof(hp[0]), cudaMemcpyHostToDevice));
      for (void** o : {&out_one_cta, &out_chunked, &out_again, &out_half}) {
        CUDA_CHECK(cudaMalloc(o, out_bytes));
        CUDA_CHECK(cudaMemset(*o, 0x7f, out_bytes));
      }
      CUDA_CHECK(cudaMalloc(&scratch, scratch_bytes));
      CUDA_CHECK(cudaMemset(scratch, 0, scratch_bytes));
      const auto outs = [&](void* o, int64_t rows) { return cuda_ops::sample_outputs_at(o, rows); };
      cuda_ops::sample(d.get(), S, V, dp, hp.data(), nullptr, outs(out_one_cta, S), nullptr);
      cuda_ops::sample(d.get(), S, V, dp, hp.data(), nullptr, outs(out_chunked, S), nullptr, scratch);
      cuda_ops::sample(d.get(), S, V, dp, hp.data(), nullptr, outs(out_again, S), nullptr, scratch);
      cuda_ops::sample(d.get(), S / 2, V, dp, nullptr, nullptr, outs(out_half, S / 2), nullptr, scratch);
      CUDA_CHECK(cudaDeviceSynchronize());
      const auto download = [&](void* o) {
        std::vector<uint32_t> h(out_bytes / 4);
        CUDA_CHECK(cudaMemcpy(h.data(), o, out_bytes, cudaMemcpyDeviceToHost));
        return h;
      };
      auto one_cta = download(out_one_cta), chunked = download(out_chunked);
      const auto again = download(out_again), half = download(out_half);
      EXPECT_EQ(chunked, again) << what << ": a second chunk pass on the same scratch differs";
      const auto a = outs(one_cta.data(), S), b = outs(chunked.data(), S);
      auto near = [](float x, float y) {
        return (std::isnan(x) && std::isnan(y)) || x == y || std::fabs(x - y) <= 1e-5f;
      };
      for (int64_t i = 0; i < S; ++i) {
        EXPECT_EQ(a.token_ids[i], b.token_ids[i]) << what << " row " << i;
        EXPECT_PRED2(near, a.token_logprobs[i], b.token_logprobs[i]) << what << " row " << i;
        if (i < S / 2) {  // bit for bit: the same chunk pass
          EXPECT_EQ(half[i], chunked[i]) << what << " half, token of row " << i;
          EXPECT_EQ(half[S / 2 + i], chunked[S + i]) << what << " half, logprob of row " << i;
        }
        for (int j = 0; j < num_logprobs; ++j) {
          const int64_t k = i * cuda_ops::kMaxSampleLogprobs + j;
          EXPECT_EQ(a.top_ids[k], b.top_ids[k]) << what << " row " << i << " top " << j;
          EXPECT_PRED2(near, a.top_logprobs[k], b.top_logprobs[k]) << what << " row " << i << " top " << j;
        }
      }
      cudaFree(dp);
      for (void* o : {out_one_cta, out_chunked, out_again, out_half}) cudaFree(o);
      cudaFree(scratch);
    }
  }
}

// Batches of only greedy and plain temperature rows without logprobs: the chunk pass draws every token
// and the one-CTA kernel does not run at all. Against the CPU sampler, on several logit kinds.
TEST(CudaSampling, ChunkPassAloneMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(41);
  const LogitKind kinds[] = {LogitKind::kNormal, LogitKind::kTies, LogitKind::kSomeNegInf, LogitKind::kPeaky,
                             LogitKind::kOneFinite, LogitKind::kAllNegInf};
  int allowed = 0;
  for (const int64_t V : {4097, 10001, 151936}) {
    for (const LogitKind kind : kinds) {
      std::vector<Sequence> seqs;
      std::vector<float> logits;
      for (const float T : {0.0f, 0.6f, 1.0f, 1.7f, 0.05f}) {
        seqs.push_back(make_seq(static_cast<int64_t>(seqs.size()), V, sp(T), rng));
        const auto row = make_logits(V, kind, rng);
        logits.insert(logits.end(), row.begin(), row.end());
      }
      allowed += compare_rows(V, logits, seqs, "V=" + std::to_string(V) + " kind=" + std::to_string(static_cast<int>(kind)));
    }
  }
  EXPECT_LE(allowed, 1);
}

// The sampler's x / T (a reciprocal kept per row and Markstein's correction, __fdiv_rn outside the safe
// range) against the CPU's IEEE division, bit for bit: random bit patterns (every binade, denormals,
// +-inf, NaN), logit-like values, and edges (0, -0, the fast path's bounds, all-ones mantissas), for
// temperatures in use, all-ones-mantissa ones, the fast path's bounds and beyond, and random ones.
TEST(CudaSampling, DividerMatchesCpuDivision) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(51);
  std::vector<float> x;
  for (int i = 0; i < (1 << 21); ++i) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  std::normal_distribution<float> logit(0.0f, 5.0f);
  for (int i = 0; i < (1 << 21); ++i) x.push_back(logit(rng));
  for (float e : {0.0f, -0.0f, 0x1p-60f, 0x1p60f, 0x1.fffffep-61f, 0x1.000002p60f, 0x1.fffffep0f, 0x1.fffffep-1f,
                  0x1p-126f, 0x1p-149f, std::numeric_limits<float>::infinity(), kNegInf,
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::quiet_NaN()}) {
    x.push_back(e);
    x.push_back(-e);
  }
  std::vector<float> temps = {0.6f, 0.7f, 0.8f, 1.0f, 1.3f, 1.7f, 0.05f, 1e-5f, 3.0f, 0x1.fffffep-1f, 0x1.fffffep0f,
                              0x1p-20f, 0x1p20f, 0x1.fffffep-21f, 0x1.000002p20f, 1e7f};
  std::uniform_real_distribution<float> log_t(std::log(1e-5f), std::log(100.0f));
  for (int i = 0; i < 16; ++i) temps.push_back(std::exp(log_t(rng)));
  DeviceLogits dx(x);
  DeviceLogits dout(x);  // same size: the output buffer
  for (const float t : temps) {
    cuda_ops::divide_like_sampler(dx.get(), static_cast<int64_t>(x.size()), t, dout.get(), nullptr);
    const std::vector<float> got = dout.download();
    int bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = x[i] / t;
      const bool same = std::isnan(want) ? std::isnan(got[i]) : std::bit_cast<uint32_t>(want) == std::bit_cast<uint32_t>(got[i]);
      if (!same && ++bad <= 5)
        ADD_FAILURE() << "T=" << t << " x=" << x[i] << ": got " << got[i] << ", the CPU " << want;
    }
    EXPECT_EQ(bad, 0) << "T=" << t;
  }
}

// ---- micro-benchmark (run with --gtest_also_run_disabled_tests) -------------------------------------

void bench(const char* name, const SamplingParams& p, int64_t S = 256) {
  const int64_t V = 151936;
  std::mt19937 rng(5);
  std::vector<float> logits;
  std::vector<Sequence> seqs;
  for (int64_t i = 0; i < S; ++i) {
    const auto row = make_logits(V, LogitKind::kPeaky, rng);
    logits.insert(logits.end(), row.begin(), row.end());
    seqs.push_back(make_seq(i, V, p, rng));
  }
  std::vector<const Sequence*> ptrs;
  for (const auto& s : seqs) ptrs.push_back(&s);
  DeviceLogits d(logits);
  GpuSampler g(kEos, V, S);
  cudaStream_t st;
  CUDA_CHECK(cudaStreamCreate(&st));
  for (int i = 0; i < 3; ++i) g.sample(ptrs, d.get(), st);
  const int iters = 20;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) g.sample(ptrs, d.get(), st);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
  // Kernel alone.
  std::vector<cuda_ops::GpuSamplingParams> hp(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) {
    hp[i] = {p.temperature, static_cast<int32_t>(p.top_k > 0 ? p.top_k : 0), p.top_p, p.min_p, 1.0f, 0.0f, 0.0f,
             static_cast<int32_t>(p.logprobs), seqs[i].rng_state, 0, 0, 0};
  }
  cuda_ops::GpuSamplingParams* dp;
  void* dout;
  CUDA_CHECK(cudaMalloc(&dp, hp.size() * sizeof(hp[0])));
  CUDA_CHECK(cudaMemcpy(dp, hp.data(), hp.size() * sizeof(hp[0]), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMalloc(&dout, cuda_ops::sample_output_words(S) * 4));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  void* scratch;
  CUDA_CHECK(cudaMalloc(&scratch, cuda_ops::sample_scratch_bytes(S, V)));
  const auto out = cuda_ops::sample_outputs_at(dout, S);
  CUDA_CHECK(cudaMemset(scratch, 0, cuda_ops::sample_scratch_bytes(S, V)));
  cuda_ops::sample(d.get(), S, V, dp, hp.data(), nullptr, out, st, scratch);
  CUDA_CHECK(cudaEventRecord(e0, st));
  for (int i = 0; i < iters; ++i) cuda_ops::sample(d.get(), S, V, dp, hp.data(), nullptr, out, st, scratch);
  CUDA_CHECK(cudaEventRecord(e1, st));
  CUDA_CHECK(cudaEventSynchronize(e1));
  float kms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&kms, e0, e1));
  std::printf("[bench] %-28s S=%lld V=%lld: kernel %.3f ms, GpuSampler::sample %.3f ms\n", name,
              static_cast<long long>(S), static_cast<long long>(V), kms / iters, ms);
  cudaFree(dp);
  cudaFree(dout);
  cudaFree(scratch);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(st);
}

TEST(CudaSampling, DISABLED_Benchmark) {
  SKIP_WITHOUT_CUDA();
  bench("greedy", sp(0.0f), 1);
  bench("T=0.8", sp(0.8f), 1);
  bench("greedy", sp(0.0f));
  { auto p = sp(0.0f); p.logprobs = 20; bench("greedy + 20 logprobs", p); }
  bench("T=0.8", sp(0.8f));
  bench("T=0.8", sp(0.8f), 224);
  bench("T=0.8", sp(0.8f), 140);
  bench("T=0.8", sp(0.8f), 64);
  { auto p = sp(0.8f); p.top_p = 0.9f; bench("T=0.8 top_p=0.9", p); }
  { auto p = sp(0.8f); p.top_k = 50; p.top_p = 0.9f; bench("T=0.8 top_k=50 top_p=0.9", p); }
  { auto p = sp(0.8f); p.top_p = 0.9f; p.min_p = 0.05f; p.logprobs = 5; bench("top_p + min_p + 5 logprobs", p); }
}

}  // namespace
}  // namespace nanovllm

namespace nanovllm {
namespace {

// feed_sampled_tokens against its CPU reference (ids[i] < 0 -> sampled[-1 - ids[i]]) on random ids,
// about a third of them fed from random rows, sizes around the 256-thread block boundary.
TEST(CudaSampling, FeedSampledTokensMatchesReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(31);
  for (const int64_t n : {1, 15, 255, 256, 257, 513, 1000}) {
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 600);
    std::vector<int32_t> sampled(static_cast<size_t>(rows)), ids(static_cast<size_t>(n));
    for (auto& v : sampled) v = static_cast<int32_t>(rng() % 151936);
    for (auto& v : ids) v = rng() % 3 == 0 ? -1 - static_cast<int32_t>(rng() % rows) : static_cast<int32_t>(rng() % 151936);
    std::vector<int32_t> want = ids;
    for (auto& v : want)
      if (v < 0) v = sampled[static_cast<size_t>(-1 - v)];
    cuda_test::DeviceTensor d_ids(DType::kI32, {n}, ids), d_sampled(DType::kI32, {rows}, sampled);
    cuda_ops::feed_sampled_tokens(d_ids.view().data_as<int32_t>(), n, d_sampled.view().data_as<int32_t>(), nullptr);
    EXPECT_EQ(d_ids.download<int32_t>(), want) << "n = " << n;
  }
}

// The kernel-staged step inputs: a copy of pinned host words where only negative words inside the ids
// range are fed (negative words elsewhere, as padding block-table entries are, stay), from device samples
// or mapped pinned ones (GpuSampler writes its tokens there); and a second region (the sampler's
// parameters) copied plainly by the same launch, shorter or longer than the first.
TEST(CudaSampling, StageStepInputsMatchesReference) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(32);
  for (const int64_t n : {1, 15, 255, 256, 257, 513, 4099}) {
    const int64_t rows = 1 + static_cast<int64_t>(rng() % 300);
    const int64_t ids_begin = static_cast<int64_t>(rng() % static_cast<uint32_t>(n));
    const int64_t num_ids = std::min<int64_t>(n - ids_begin, 1 + static_cast<int64_t>(rng() % 700));
    Buffer host(pinned_host_allocator(), static_cast<size_t>(n) * 4);
    Buffer host_sampled(pinned_host_allocator(), static_cast<size_t>(rows) * 4);
    auto* words = static_cast<int32_t*>(host.data());
    auto* sampled = static_cast<int32_t*>(host_sampled.data());
    for (int64_t r = 0; r < rows; ++r) sampled[r] = static_cast<int32_t>(rng() % 151936);
    for (int64_t i = 0; i < n; ++i)
      words[i] = rng() % 3 == 0 ? -1 - static_cast<int32_t>(rng() % rows) : static_cast<int32_t>(rng() % 151936);
    std::vector<int32_t> copied(words, words + n), fed = copied;
    for (int64_t i = ids_begin; i < ids_begin + num_ids; ++i)
      if (fed[static_cast<size_t>(i)] < 0) fed[static_cast<size_t>(i)] = sampled[-1 - fed[static_cast<size_t>(i)]];
    const std::vector<int32_t> sampled_vec(sampled, sampled + rows);
    cuda_test::DeviceTensor d_out(DType::kI32, {n}), d_sampled(DType::kI32, {rows}, sampled_vec);
    const auto* src = static_cast<const int32_t*>(mapped_device_pointer(host.data()));
    int32_t* dst = d_out.view().data_as<int32_t>();
    cuda_ops::stage_step_inputs(dst, src, n, ids_begin, num_ids, nullptr, {}, cuda_test::on());
    EXPECT_EQ(d_out.download<int32_t>(), copied) << "n = " << n << ", not fed";
    d_out.fill_bytes(0xff);
    cuda_ops::stage_step_inputs(dst, src, n, ids_begin, num_ids, d_sampled.view().data_as<int32_t>(), {}, cuda_test::on());
    EXPECT_EQ(d_out.download<int32_t>(), fed) << "n = " << n << ", fed from device memory";
    // With a second region of rows words (the pinned samples as its source).
    d_out.fill_bytes(0xff);
    cuda_test::DeviceTensor d_extra(DType::kI32, {rows});
    d_extra.fill_bytes(0xff);
    const auto* mapped_sampled = static_cast<const int32_t*>(mapped_device_pointer(host_sampled.data()));
    cuda_ops::stage_step_inputs(dst, src, n, ids_begin, num_ids, mapped_sampled,
                                {d_extra.view().data_as<int32_t>(), mapped_sampled, rows}, cuda_test::on());
    EXPECT_EQ(d_out.download<int32_t>(), fed) << "n = " << n << ", fed from pinned memory";
    EXPECT_EQ(d_extra.download<int32_t>(), sampled_vec) << "n = " << n << ", second region of " << rows << " words";
  }
}

}  // namespace
}  // namespace nanovllm
