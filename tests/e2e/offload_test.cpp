// Layer-wise CPU KV offload on the CPU backend: the offloaded path must give exactly the tokens of the
// paged path (same fp32 math, different cache plumbing), across host block boundaries, chunked layer
// prefill, every ring size, and back-to-back requests; for each KV cache format (the model's dtype and fp8:
// codes and scales move through the host pool, the ring and the decode buffers together). The CPU offload device defers its copies to the
// latest point the events allow and checks every access for races, so a missing event fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>

#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/offload/offload_device.h"
#include "nanovllm/offload/offload_runner.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using testing::random_prompts;

// Greedy with the top-5 logprobs of every step: a wrong key somewhere in a long context rarely flips
// a greedy token of a tiny random model, but it always moves the logprobs.
SamplingParams greedy(int64_t max_tokens) { return testing::greedy(max_tokens, 5); }

// Tokens followed by their top-5 logprobs (ids and values at 1e-5), one row per request: both paths
// run the same fp32 kernels, only the KV cache plumbing differs.
struct Result {
  std::vector<int32_t> tokens;
  std::vector<std::vector<TokenLogprob>> logprobs;
  bool operator==(const Result& o) const {
    if (tokens != o.tokens || logprobs.size() != o.logprobs.size()) return false;
    for (size_t i = 0; i < logprobs.size(); ++i) {
      if (logprobs[i].size() != o.logprobs[i].size()) return false;
      for (size_t j = 0; j < logprobs[i].size(); ++j)
        if (logprobs[i][j].id != o.logprobs[i][j].id || std::abs(logprobs[i][j].logprob - o.logprobs[i][j].logprob) > 1e-5f)
          return false;
    }
    return true;
  }
};
void PrintTo(const Result& r, std::ostream* os) {
  *os << "tokens [";
  for (int32_t t : r.tokens) *os << t << " ";
  *os << "] first logprob " << (r.logprobs.empty() || r.logprobs[0].empty() ? 0.0f : r.logprobs[0][0].logprob);
}

std::vector<Result> tokens_of(const std::vector<RequestOutput>& outs) {
  std::vector<Result> t;
  for (const auto& o : outs) t.push_back({o.token_ids, o.logprobs});
  return t;
}

class Offload : public ::testing::TestWithParam<const char*> {  // the KV cache dtype
 protected:
  void SetUp() override {
    // 3 layers: ring sizes 1, 2 (< L), 3 (= L) and more (clamped) all take different paths.
    base_.model.path = testing::tiny_model_dir("offload", {{"num_hidden_layers", 3}}, 21);
    base_.model.backend = Backend::kCpu;
    base_.cache.kv_cache_dtype = GetParam();
    base_.cache.block_size = 8;
    base_.model.max_model_len = 256;
    base_.scheduler.max_num_batched_tokens = 256;
  }
  EngineConfig offloaded(int64_t host_block = 8, int64_t num_kv_buffers = 4) const {
    EngineConfig ec = base_;
    ec.offload.enabled = true;
    ec.offload.min_tokens = 1;  // every request takes the offload path
    ec.offload.block_size = host_block;
    ec.offload.num_kv_buffers = num_kv_buffers;
    return ec;
  }
  std::vector<Result> run(const EngineConfig& ec, const std::vector<std::vector<int32_t>>& prompts,
                          int64_t max_tokens) const {
    LLM llm(ec);
    return tokens_of(llm.generate(prompts, greedy(max_tokens)));
  }
  EngineConfig base_;
};

// Prompt lengths around host block boundaries (block 8), decode of 30 tokens crossing 3-4 boundaries
// from a partial block (and from a full one).
TEST_P(Offload, MatchesPagedPathAroundBlockBoundaries) {
  const auto prompts = random_prompts({1, 2, 7, 8, 9, 15, 16, 17, 23, 24, 25, 61}, 512, 1);
  const auto reference = run(base_, prompts, 30);
  LLM llm(offloaded());
  const auto outs = llm.generate(prompts, greedy(30));
  EXPECT_EQ(tokens_of(outs), reference);
  const OffloadStats st = llm.engine().runner_stats().offload->steps;
  EXPECT_EQ(st.prefills, static_cast<int64_t>(prompts.size()));  // every request went through the offload path
  EXPECT_EQ(st.decode_steps, static_cast<int64_t>(prompts.size()) * 29);
  EXPECT_GT(st.h2d_bytes, 0);
}

TEST_P(Offload, HostBlockSizesFromOneToLargerThanTheSequence) {
  const auto prompts = random_prompts({5, 13, 32}, 512, 2);
  const auto reference = run(base_, prompts, 20);
  for (int64_t host_block : {1, 3, 8, 16, 64, 1024}) EXPECT_EQ(run(offloaded(host_block), prompts, 20), reference) << host_block;
}

TEST_P(Offload, EveryRingSizeGivesTheSameTokens) {
  const auto prompts = random_prompts({11, 40}, 512, 3);
  const auto reference = run(base_, prompts, 18);
  for (int64_t nb = 1; nb <= 8; ++nb) EXPECT_EQ(run(offloaded(8, nb), prompts, 18), reference) << "num_kv_buffers " << nb;
}

TEST_P(Offload, ChunkedLayerPrefillMatches) {
  // A workspace of 16 rows: each layer of a 70-token prompt runs in 5 chunks over the layer buffer.
  const auto prompts = random_prompts({70, 16, 17, 33}, 512, 4);
  auto paged = base_;
  paged.scheduler.max_num_batched_tokens = 16;
  const auto reference = run(paged, prompts, 12);
  auto off = offloaded(8);
  off.scheduler.max_num_batched_tokens = 16;
  EXPECT_EQ(run(off, prompts, 12), reference);
}

TEST_P(Offload, SequentialRequestsMatchEachRunAlone) {
  const auto prompts = random_prompts({50, 3, 29, 9, 64}, 512, 5);
  std::vector<Result> alone;
  for (const auto& p : prompts) alone.push_back(run(offloaded(), {p}, 14)[0]);
  LLM llm(offloaded());  // one engine, one request after the other: nothing stale may leak
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(tokens_of(llm.generate({prompts[i]}, greedy(14)))[0], alone[i]) << "request " << i;
  EXPECT_EQ(run(base_, prompts, 14), alone);
}

TEST_P(Offload, StopsAtMaxModelLenLikeThePagedPath) {
  // max_model_len 256: prompts of 255 (one token out), 250 and 241 (stopped by the limit, not max_tokens).
  const auto prompts = random_prompts({255, 250, 241}, 512, 10);
  const auto reference = run(base_, prompts, 40);
  const auto got = run(offloaded(8), prompts, 40);
  EXPECT_EQ(got, reference);
  EXPECT_EQ(got[0].tokens.size(), 1u);
  EXPECT_EQ(got[2].tokens.size(), 15u);
}

TEST_P(Offload, SeededSamplingMatches) {
  const auto prompts = random_prompts({12, 31}, 512, 6);
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_p = 0.9f;
  sp.seed = 1234;
  sp.max_tokens = 16;
  sp.ignore_eos = true;
  LLM paged(base_), off(offloaded());
  EXPECT_EQ(tokens_of(off.generate(prompts, sp)), tokens_of(paged.generate(prompts, sp)));
}

TEST_P(Offload, LongRequestsOffloadWhenTheyDoNotFitTheGpuCacheShortOnesDoNot) {
  // A paged cache of 6 blocks x 8 tokens = 48 tokens: the 60-token prompt cannot use it.
  const auto prompts = random_prompts({60, 5, 44, 10}, 512, 7);
  const auto reference = run(base_, prompts, 10);
  auto ec = base_;
  ec.cache.num_kv_blocks = 6;
  ec.offload.enabled = true;
  ec.offload.block_size = 8;
  LLM llm(ec);
  EXPECT_TRUE(llm.engine().is_offloaded(60, greedy(10)));
  EXPECT_TRUE(llm.engine().is_offloaded(44, greedy(10)));  // 54 tokens with its output
  EXPECT_FALSE(llm.engine().is_offloaded(10, greedy(10)));
  EXPECT_EQ(tokens_of(llm.generate(prompts, greedy(10))), reference);
  EXPECT_EQ(llm.engine().runner_stats().offload->steps.prefills, 2);
}

TEST_P(Offload, CpuMemoryLimitIsAClearError) {
  auto ec = offloaded(8);
  // 3 layers x (K + V) x 2 KV heads x head_dim x 4 bytes per token; 16 tokens fit in 16 x that.
  LLM probe(ec);
  const int64_t per_token = probe.engine().offload_host_bytes(8) / 8;
  ec.offload.cpu_memory_limit = 16 * per_token;
  LLM llm(ec);
  const auto prompts = random_prompts({12, 30}, 512, 8);
  EXPECT_EQ(llm.generate({prompts[0]}, greedy(4)).size(), 1u);  // 16 tokens: fits
  try {
    llm.generate({prompts[1]}, greedy(4));  // 34 tokens -> 40 with host blocks
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu_memory_limit"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(llm.engine().has_unfinished());  // nothing was queued
}

TEST_P(Offload, BadConfigIsAClearError) {
  auto ec = offloaded(8, 9);
  EXPECT_THROW(LLM{ec}, Error);
  ec.offload.num_kv_buffers = 0;
  EXPECT_THROW(LLM{ec}, Error);
}

TEST_P(Offload, AbortMidDecodeThenNextRequestIsExact) {
  const auto prompts = random_prompts({21, 37}, 512, 9);
  const auto reference = run(base_, {prompts[1]}, 12);
  LLM llm(offloaded());
  LLMEngine& e = llm.engine();
  const int64_t id = e.add_request(prompts[0], greedy(40));
  for (int i = 0; i < 5; ++i) e.step();
  e.abort_request(id);
  while (e.has_unfinished()) e.step();
  EXPECT_EQ(tokens_of(llm.generate({prompts[1]}, greedy(12))), reference);
}

// Requests with their own max_tokens through one engine, all submitted at once; outputs by request id.
std::vector<Result> run_each(LLM& llm, const std::vector<std::vector<int32_t>>& prompts,
                             const std::vector<int64_t>& max_tokens) {
  LLMEngine& e = llm.engine();
  std::vector<int64_t> ids;
  for (size_t i = 0; i < prompts.size(); ++i) ids.push_back(e.add_request(prompts[i], greedy(max_tokens[i])));
  std::vector<Result> got(prompts.size());
  while (e.has_unfinished())
    for (const RequestOutput& o : e.step())
      got[static_cast<size_t>(std::find(ids.begin(), ids.end(), o.request_id) - ids.begin())] = {o.token_ids, o.logprobs};
  return got;
}

// Several offloaded requests at once (offload max_num_seqs 3): 7 requests of different prompt and output
// lengths pass through 3 lanes, so lanes are freed and reused while others decode, decode steps batch 2-3
// sequences that cross host blocks at different steps, and prefills run next to the others' decodes. Every
// request gets exactly its tokens and logprobs of the paged path, for ring sizes below, at and above L.
TEST_P(Offload, ConcurrentRequestsBatchTheirDecodeStepsAndMatchThePagedPath) {
  const auto prompts = random_prompts({17, 1, 40, 9, 63, 8, 24}, 512, 11);
  const std::vector<int64_t> max_tokens = {30, 12, 5, 26, 19, 33, 2};
  LLM paged(base_);
  const auto reference = run_each(paged, prompts, max_tokens);
  for (int64_t nb : {1, 3, 4}) {
    auto ec = offloaded(8, nb);
    ec.offload.max_num_seqs = 3;
    LLM llm(ec);
    EXPECT_EQ(run_each(llm, prompts, max_tokens), reference) << "num_kv_buffers " << nb;
    const OffloadStats st = llm.engine().runner_stats().offload->steps;
    int64_t decode_tokens = 0;
    for (int64_t m : max_tokens) decode_tokens += m - 1;
    EXPECT_EQ(st.prefills, 7);
    EXPECT_EQ(st.decode_tokens, decode_tokens);
    EXPECT_LT(st.decode_steps * 3, decode_tokens * 2);  // more than 1.5 sequences per decode step
  }
}

TEST_P(Offload, ConcurrentRequestsWithChunkedLayerPrefillMatch) {
  // A workspace of 16 rows: the 70-token prompt's layers run in 5 chunks into its lane of the layer buffer.
  const auto prompts = random_prompts({70, 16, 33, 5}, 512, 12);
  const std::vector<int64_t> max_tokens = {12, 20, 9, 15};
  auto paged_ec = base_;
  paged_ec.scheduler.max_num_batched_tokens = 16;
  LLM paged(paged_ec);
  const auto reference = run_each(paged, prompts, max_tokens);
  auto ec = offloaded(8, 2);
  ec.scheduler.max_num_batched_tokens = 16;
  ec.offload.max_num_seqs = 4;
  LLM llm(ec);
  EXPECT_EQ(run_each(llm, prompts, max_tokens), reference);
}

TEST_P(Offload, AbortOneOfConcurrentRequestsOthersStayExact) {
  const auto prompts = random_prompts({21, 37, 12, 50}, 512, 13);
  auto ec = offloaded(8, 2);
  ec.offload.max_num_seqs = 2;
  LLM paged(base_);
  const auto reference = run_each(paged, {prompts[1], prompts[2], prompts[3]}, {20, 16, 10});
  LLM llm(ec);
  LLMEngine& e = llm.engine();
  const int64_t doomed = e.add_request(prompts[0], greedy(40));
  const int64_t kept = e.add_request(prompts[1], greedy(20));
  for (int i = 0; i < 6; ++i) e.step();
  e.abort_request(doomed);  // its lane goes to the next request while `kept` decodes on
  const int64_t next = e.add_request(prompts[2], greedy(16));
  const int64_t last = e.add_request(prompts[3], greedy(10));
  std::vector<Result> got(3);
  while (e.has_unfinished())
    for (const RequestOutput& o : e.step()) {
      if (o.request_id == kept) got[0] = {o.token_ids, o.logprobs};
      if (o.request_id == next) got[1] = {o.token_ids, o.logprobs};
      if (o.request_id == last) got[2] = {o.token_ids, o.logprobs};
    }
  EXPECT_EQ(got, reference);
}

TEST_P(Offload, ConcurrencyOptionsAreChecked) {
  auto ec = offloaded(8);
  ec.offload.max_num_seqs = 0;
  EXPECT_THROW(LLM{ec}, Error);
  ec.offload.max_num_seqs = 65;
  EXPECT_THROW(LLM{ec}, Error);
  ec.offload.max_num_seqs = 4;
  ec.scheduler.max_num_seqs = 3;  // a batched decode samples one row per sequence of the runner's workspace
  try {
    LLM llm(ec);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("offload_max_num_seqs"), std::string::npos) << e.what();
  }
}

// The host pool of an fp8 cache: per token and layer, K and V of Hk x (D codes + one f32 scale) bytes.
TEST_P(Offload, HostPoolHoldsTheCacheFormat) {
  LLM llm(offloaded(8));
  const ModelConfig& c = llm.engine().model_config();
  const int64_t row = std::string(GetParam()) == "fp8" ? c.head_dim + 4 : c.head_dim * 4;  // fp8 or f32
  EXPECT_EQ(llm.engine().offload_host_bytes(8), 8 * c.num_hidden_layers * 2 * c.num_key_value_heads * row);
}

INSTANTIATE_TEST_SUITE_P(KvCacheDtype, Offload, ::testing::Values("auto", "fp8"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// --- the CPU offload device itself (buffers declared before the device: it runs pending copies when destroyed)

TEST(CpuOffloadDevice, DeferredCopyRunsWhenWaitedFor) {
  int src = 7, dst = 0;
  auto dev = make_cpu_offload_device();
  const auto q = dev->create_queue();
  const auto done = dev->create_event();
  dev->copy(&dst, &src, sizeof(int), CopyKind::kH2D, q, "copy");
  dev->record(done, q);
  EXPECT_EQ(dst, 0);  // not yet: nobody waited
  dev->wait(OffloadDevice::kCompute, done);
  EXPECT_EQ(dst, 7);
}

TEST(CpuOffloadDevice, WaitOnANeverRecordedEventIsANoOp) {
  auto dev = make_cpu_offload_device();
  const auto e = dev->create_event();
  EXPECT_NO_THROW(dev->wait(OffloadDevice::kCompute, e));
}

TEST(CpuOffloadDevice, UnorderedWriteAfterReadIsARace) {
  std::vector<int> buf(16, 1), host(16, 0);
  auto dev = make_cpu_offload_device();
  const auto q = dev->create_queue();
  dev->copy(host.data(), buf.data(), 64, CopyKind::kD2H, q, "d2h of buf");
  // The compute queue overwrites buf without waiting for the D2H: a race on a GPU.
  EXPECT_THROW(dev->note_access(buf.data(), 64, true, OffloadDevice::kCompute, "kernel writes buf"), Error);
}

TEST(CpuOffloadDevice, WriteAfterReadOrderedByAnEventIsFine) {
  std::vector<int> buf(16, 1), host(16, 0);
  auto dev = make_cpu_offload_device();
  const auto q = dev->create_queue();
  const auto drained = dev->create_event();
  dev->copy(host.data(), buf.data(), 64, CopyKind::kD2H, q, "d2h of buf");
  dev->record(drained, q);
  dev->wait(OffloadDevice::kCompute, drained);
  EXPECT_NO_THROW(dev->note_access(buf.data(), 64, true, OffloadDevice::kCompute, "kernel writes buf"));
  EXPECT_EQ(host[3], 1);
}

TEST(CpuOffloadDevice, ReadsAndDisjointBytesDoNotConflict) {
  std::vector<int> buf(16, 1), a(16, 0), b(16, 0);
  auto dev = make_cpu_offload_device();
  const auto q1 = dev->create_queue(), q2 = dev->create_queue();
  EXPECT_NO_THROW(dev->copy(a.data(), buf.data(), 64, CopyKind::kD2H, q1, "buf -> a"));
  EXPECT_NO_THROW(dev->copy(b.data(), buf.data(), 32, CopyKind::kD2H, q2, "buf -> b head"));  // read + read
  EXPECT_NO_THROW(dev->note_access(b.data() + 8, 32, true, OffloadDevice::kCompute, "b tail"));  // disjoint
  EXPECT_THROW(dev->note_access(b.data() + 4, 32, true, OffloadDevice::kCompute, "b middle"), Error);
}

TEST(CpuOffloadDevice, TransitiveOrderThroughAThirdQueue) {
  std::vector<int> x(4, 5), y(4, 0), z(4, 0);
  auto dev = make_cpu_offload_device();
  const auto a = dev->create_queue(), b = dev->create_queue();
  const auto ea = dev->create_event(), eb = dev->create_event();
  dev->copy(y.data(), x.data(), 16, CopyKind::kD2H, a, "x -> y");
  dev->record(ea, a);
  dev->wait(b, ea);
  dev->copy(z.data(), y.data(), 16, CopyKind::kH2D, b, "y -> z");
  dev->record(eb, b);
  EXPECT_EQ(z[0], 0);
  dev->wait(OffloadDevice::kCompute, eb);  // runs b, which first runs a
  EXPECT_EQ(z[0], 5);
  EXPECT_NO_THROW(dev->note_access(y.data(), 16, true, OffloadDevice::kCompute, "overwrite y"));
}

TEST(CpuOffloadDevice, SynchronousModeCopiesAtOnce) {
  int src = 3, dst = 0;
  auto dev = make_cpu_offload_device({.defer_copies = false, .check_races = false});
  const auto q = dev->create_queue();
  dev->copy(&dst, &src, sizeof(int), CopyKind::kH2D, q, "copy");
  EXPECT_EQ(dst, 3);
}

}  // namespace
}  // namespace nanovllm
