// The long-context quality matrix (issue 46) on the CPU backend with the trained retrieval fixture
// (tests/data/retrieval-model): every combination of
//   {GPU-resident cache, offload, offload with 2 lanes} x {dense, xattention, minference, flexprefill, avgpool,
//    avgpool + block budget} x {full decode at TP 1, Quest and keyscore at TP 1 and 2} x {plain attention, Dual Chunk
//    Attention (keyscore does not run with it: the engine refuses the pair),
//    plain attention with an fp8 KV cache, YaRN (the 128K fixture, tests/data/retrieval-model-128k)}
// against the dense resident TP 1 run of the same attention and KV dtype on the same prompts (computed once per process
// and variant; the fp8 one is itself held to the same quality bounds against the unquantized one). The Dual Chunk
// Attention variant is the fixture with a dual_chunk_attention_config of chunks of 192 positions (chunk_size 256,
// local_size 64, logits scaled past 256 tokens), so a prompt spans four chunks and every sparse policy scores and
// attends intra, successive and inter keys (docs/sparse_attention.md, "With Dual Chunk Attention"). Dual Chunk
// Attention with an fp8 cache is not a cell: the engine refuses it (its kernels read a cache of the model's dtype).
// TP 2 runs with the sparse decode policies (whose cells run the sparse prefill as well). Each cell runs at the sparse
// settings, four of them (one per path, each decode policy, both TP sizes) also covering:
//   covering: the policy's threshold at 1 (minference: every diagonal) and a decode budget covering the context: the
//     dense tokens exactly. Four covering runs put every path, each decode policy and both TP sizes through that rule;
//     covering runs in all 12 cells were 40% of the matrix's time (it ran ~20 minutes of CI's two cores);
//   sparse: the policy at its defaults (knobs scaled to the short context, kSparse below) and a decode budget of a
//     fifth of the context: (1) it really went sparse: every prompt's prefill in every sparse layer (counters), fewer
//     blocks and keys than dense; (2) the offloaded paths give the resident path's tokens and first-token logprobs
//     exactly (same chunks, same patterns: the offload path may never differ from the GPU cache); (3) quality within
//     the stated tolerance of dense: the score, the first token's top-1 agreement and its KL (tools/eval/kl.h).
// Prompts are short (kContext) so the whole matrix stays within minutes under ASan on two cores; pattern blocks of 16
// tokens and a 256-token min_tokens make every policy engage there. One parametrised test per prefill policy (each
// its own ctest process: the matrix spreads over ctest's jobs), looping over paths, decode policies and TP sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/kl.h"
#include "eval/runner.h"
#include "eval/sample.h"
#include "eval/tasks.h"
#include "eval_test_util.h"
#include "nanovllm/llm/llm_engine.h"
#include "nanovllm/sparse/decode_policy.h"
#include "nanovllm/sparse/sparse_prefill_attention.h"
#include "support/process_scratch_dir.h"

namespace nanovllm::eval {
namespace {

using testing::long_retrieval_model_dir;
using testing::retrieval_model_dir;

constexpr int64_t kContext = 640;   // prompt + generated tokens
constexpr int64_t kNewTokens = 10;  // a 7-digit answer, its period and EOS fit
constexpr int64_t kLogprobs = 20;   // the first token's top-K list (KL, top-1)
constexpr int64_t kLayers = 4;      // the fixture's

// Quality at the defaults, against dense on the same prompts (2 prompts; scores in [0, 1]). Measured (with a third
// prompt then): every cell keeps every answer and the first token, first-token KL <= 2.3e-6 nats mean (3.9e-6 max;
// avgpool + budget the farthest). avgpool before its last-query scoring (issue 46) lost 2 of 3 answers here, top-1
// 0/3, KL 2.3 nats: the bounds catch that by orders of magnitude and leave rounding room.
constexpr double kMaxScoreDrop = 0.0;  // mean score
constexpr double kMinTop1 = 1.0;       // first-token top-1 agreement
constexpr double kMaxMeanKl = 1e-3;    // nats, first-token KL (a lower bound from the top-K lists)

enum class Path { kResident, kOffload, kOffloadTwoLanes };
enum class Prefill { kDense, kXAttention, kMInference, kFlexPrefill, kAvgPool, kAvgPoolBudget };

const char* name(Path p) {
  switch (p) {
    case Path::kResident: return "resident";
    case Path::kOffload: return "offload";
    case Path::kOffloadTwoLanes: return "offload-2-lanes";
  }
  return "?";
}
const char* name(Prefill p) {
  switch (p) {
    case Prefill::kDense: return "dense";
    case Prefill::kXAttention: return "xattention";
    case Prefill::kMInference: return "minference";
    case Prefill::kFlexPrefill: return "flexprefill";
    case Prefill::kAvgPool: return "avgpool";
    case Prefill::kAvgPoolBudget: return "avgpool_budget";
  }
  return "?";
}

// The sparse decode policies (sparse/policies.h) the matrix runs; kFull is dense decode.
enum class Decode { kFull, kQuest, kKeyscore };
const char* name(Decode d) { return d == Decode::kQuest ? "quest" : d == Decode::kKeyscore ? "keyscore" : "full"; }

struct Cell {
  Path path = Path::kResident;
  Prefill prefill = Prefill::kDense;
  Decode decode = Decode::kFull;
  int64_t tp = 1;
  bool covering = false;
  bool dca = false;     // the fixture with Dual Chunk Attention (dca_model_dir)
  bool fp8_kv = false;  // --kv-cache-dtype fp8 (docs/kv_cache.md); else the model's dtype
  bool yarn = false;    // the 128K fixture: the same weights with YaRN x8 (long_retrieval_model_dir)
};

std::string describe(const Cell& c) {
  const std::string decode = c.decode != Decode::kFull ? std::string(" + ") + name(c.decode) : "";
  return std::string(name(c.prefill)) + decode + ", " + name(c.path) + ", tp " +
         std::to_string(c.tp) + (c.covering ? ", covering" : ", sparse") + (c.dca ? ", dca" : "") +
         (c.fp8_kv ? ", fp8 KV" : "") + (c.yarn ? ", yarn" : "");
}

// The fixture with a dual_chunk_attention_config: a folder of links to its files and an edited config.json (chunks of
// 192 positions, a multiple of the pattern and Quest blocks of 16). Made once per process.
std::filesystem::path dca_model_dir() {
  static const std::filesystem::path dir = [] {
    namespace fs = std::filesystem;
    static const nanovllm::testing::ProcessScratchDir scratch("nanovllm-quality-matrix-dca");
    const fs::path src = retrieval_model_dir(), out = scratch.path();
    for (const fs::directory_entry& e : fs::directory_iterator(src))
      if (e.path().filename() != "config.json") fs::create_symlink(fs::absolute(e.path()), out / e.path().filename());
    nlohmann::json config = nlohmann::json::parse(std::ifstream(src / "config.json"));
    config["dual_chunk_attention_config"] = {
        {"chunk_size", 256}, {"local_size", 64}, {"original_max_position_embeddings", 256}};
    std::ofstream(out / "config.json") << config.dump(2);
    return out;
  }();
  return dir;
}

// The knobs behind "defaults" at this length: the policies' own defaults, except those sized for long contexts
// (flexprefill's 1024-token minimum budget, the avgpool record's 4096-token budget, Quest's 2048) scaled down, and
// xattention's stride scaled with the block: 8 in 128-token blocks estimates each query block from 16 antidiagonal
// rows; in 16-token blocks it would leave 2, and with Dual Chunk Attention that missed the needle (2 of 3 answers lost,
// first-token KL 1.37 nats at 70% density; stride 4 at the same threshold and density: every answer, KL 7e-8).
struct SparseKnobs {
  int64_t pattern_block = 16;
  int64_t xattention_stride = 4;
  int64_t min_tokens = 256;
  int64_t flexprefill_min_budget = 128;
  int64_t avgpool_budget = 160;  // a quarter of the context, as 4096 of 16K
  int64_t decode_budget = 128;   // 8 pages of 16: a fifth of the context
  int64_t covering_decode_budget = 1024;
};
constexpr SparseKnobs kSparse{};

EngineConfig config_for(const Cell& c) {
  EngineConfig ec;
  ec.model.path = (c.dca ? dca_model_dir() : c.yarn ? long_retrieval_model_dir() : retrieval_model_dir()).string();
  ec.model.backend = Backend::kCpu;
  ec.model.max_model_len = 1024;
  ec.cache.block_size = 16;  // the Quest page
  // Prefix caching off: a shared prompt prefix would start the resident chunk later than the offloaded one, moving
  // its pattern blocks; the offload path must give the resident tokens exactly.
  ec.cache.enable_prefix_caching = false;
  ec.scheduler.max_num_batched_tokens = 2048;  // every prompt whole in the first resident step
  ec.scheduler.max_num_seqs = 4;
  ec.parallel.tensor_parallel_size = c.tp;
  if (c.fp8_kv) ec.cache.kv_cache_dtype = "fp8";
  if (c.path != Path::kResident) {
    ec.offload.enabled = true;
    ec.offload.min_tokens = 1;
    ec.offload.block_size = 64;
    ec.offload.max_num_seqs = c.path == Path::kOffloadTwoLanes ? 2 : 1;
  }
  if (c.decode != Decode::kFull) {
    ec.sparse.policy = name(c.decode);
    ec.sparse.budget_tokens = c.covering ? kSparse.covering_decode_budget : kSparse.decode_budget;
  }
  SparsePrefillConfig& sp = ec.sparse_prefill;
  switch (c.prefill) {
    case Prefill::kDense: return ec;
    case Prefill::kXAttention: sp.policy = SparsePrefillPolicy::kXAttention; break;
    case Prefill::kMInference: sp.policy = SparsePrefillPolicy::kMInference; break;
    case Prefill::kFlexPrefill: sp.policy = SparsePrefillPolicy::kFlexPrefill; break;
    case Prefill::kAvgPool:
    case Prefill::kAvgPoolBudget: sp.policy = SparsePrefillPolicy::kAvgPool; break;
  }
  sp.block_size = kSparse.pattern_block;
  sp.stride = kSparse.xattention_stride;
  sp.min_tokens = kSparse.min_tokens;
  sp.min_budget = kSparse.flexprefill_min_budget;
  if (c.prefill == Prefill::kAvgPoolBudget) sp.dense_layers = 1;  // the 1M record's configuration
  if (c.covering) {
    sp.threshold = 1.0;
    if (c.prefill == Prefill::kMInference) sp.slash = 100000;  // its threshold is a budget share
  } else if (c.prefill == Prefill::kAvgPoolBudget) {
    sp.budget_tokens = kSparse.avgpool_budget;
  }
  return ec;
}

struct CellRun {
  std::vector<SampleResult> results;
  SparsePrefillCounters prefill;
  bool has_prefill = false;
  SparseDecodeCounters decode;
  OffloadStats offload;
};

const std::vector<Sample>& prompts() {
  static const std::vector<Sample> samples = [] {
    const SampleBuilder builder(testing::byte_tokenizer(), none_format(), Corpus::builtin(), 42, kNewTokens);
    std::vector<Sample> s;
    // The fixture answers " 1234567.": each prompt ends with that space, so the first generated token is the answer's
    // first digit, which needs the needle (a certain space would make the first-token KL and top-1 measure nothing).
    const std::vector<int32_t> space = testing::byte_tokenizer().encode(" ", /*add_special_tokens=*/false);
    // Two prompts (an essay haystack, and keys among distractor keys): the matrix is compute-bound (the CPU
    // reference's projections and attention), and a third prompt (niah_single_1, a noise haystack) was a third of it.
    for (const char* task : {"niah_single_2", "niah_multikey_1"}) {
      s.push_back(builder.build({.task = &find_task(task), .context = kContext, .index = 0, .depth = std::nullopt}));
      s.back().prompt_ids.insert(s.back().prompt_ids.end(), space.begin(), space.end());
    }
    return s;
  }();
  return samples;
}

CellRun run(const Cell& c) {
  const auto t0 = std::chrono::steady_clock::now();
  LLMEngine engine(config_for(c));
  CellRun r;
  r.results = run_samples(engine, prompts(), {}, kLogprobs);
  const RunnerStats stats = engine.runner_stats();
  if (stats.sparse_prefill) {
    r.prefill = *stats.sparse_prefill;
    r.has_prefill = true;
  }
  if (stats.offload) {
    r.offload = stats.offload->steps;
    if (stats.offload->sparse_decode) r.decode = *stats.offload->sparse_decode;
  } else if (stats.sparse_decode) {
    r.decode = *stats.sparse_decode;
  }
  std::cout << describe(c) << ": " << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
            << " s\n";
  return r;
}

// The matrix's third axis: the attention and the KV cache's dtype.
enum class Variant { kPlain, kDca, kFp8Kv, kYarn };

const CellRun& dense_reference(Variant v) {
  switch (v) {
    case Variant::kDca: {
      static const CellRun with_dca = run(Cell{.dca = true});
      return with_dca;
    }
    case Variant::kFp8Kv: {
      static const CellRun fp8 = run(Cell{.fp8_kv = true});
      return fp8;
    }
    case Variant::kYarn: {
      static const CellRun yarn = run(Cell{.yarn = true});
      return yarn;
    }
    case Variant::kPlain: break;
  }
  static const CellRun plain = run(Cell{});
  return plain;
}

double mean_score(const CellRun& r) {
  double sum = 0;
  for (const SampleResult& s : r.results) sum += s.score;
  return sum / static_cast<double>(r.results.size());
}

void expect_dense_tokens(const CellRun& got, const CellRun& dense) {
  for (size_t i = 0; i < dense.results.size(); ++i)
    EXPECT_EQ(got.results[i].output_ids, dense.results[i].output_ids) << prompts()[i].task;
}

void expect_engaged(const Cell& c, const CellRun& got) {
  if (c.prefill != Prefill::kDense) {
    ASSERT_TRUE(got.has_prefill);
    const int64_t sparse_layers = kLayers - (c.prefill == Prefill::kAvgPoolBudget ? 1 : 0);
    // Every prompt's prefill (one chunk each, on both paths) in every sparse layer; none left dense in a step that
    // batched several prompts.
    EXPECT_EQ(got.prefill.sparse_layer_chunks, sparse_layers * static_cast<int64_t>(prompts().size()));
    EXPECT_LT(got.prefill.attended_blocks, got.prefill.causal_blocks);
  }
  if (c.decode != Decode::kFull) {
    EXPECT_GT(got.decode.sparse_layer_steps, 0);
    EXPECT_LT(got.decode.attended_keys, got.decode.context_keys);
  }
  if (c.path == Path::kOffloadTwoLanes) {
    EXPECT_LT(got.offload.decode_steps, got.offload.decode_tokens);  // the two lanes decoded together
  }
}

// A first-token top-K list as comparable (id, logprob) pairs.
std::vector<std::pair<int64_t, float>> pairs(const std::vector<TokenLogprob>& list) {
  std::vector<std::pair<int64_t, float>> out;
  for (const TokenLogprob& t : list) out.emplace_back(t.id, t.logprob);
  return out;
}

void expect_same_run(const CellRun& got, const CellRun& want) {
  for (size_t i = 0; i < want.results.size(); ++i) {
    EXPECT_EQ(got.results[i].output_ids, want.results[i].output_ids) << prompts()[i].task;
    EXPECT_EQ(pairs(got.results[i].first_token_logprobs), pairs(want.results[i].first_token_logprobs))
        << prompts()[i].task << ": the first token's top-" << kLogprobs << " (id, logprob)";
  }
}

void expect_close_to_dense(const CellRun& got, const CellRun& dense) {
  EXPECT_GE(mean_score(got), mean_score(dense) - kMaxScoreDrop);
  double kl_sum = 0, kl_max = 0;
  int64_t agree = 0;
  for (size_t i = 0; i < dense.results.size(); ++i) {
    const auto& ref = dense.results[i].first_token_logprobs;
    const auto& run = got.results[i].first_token_logprobs;
    const double kl = partition_kl_lower_bound(ref, run);
    kl_sum += kl;
    kl_max = std::max(kl_max, kl);
    agree += top_token(ref) == top_token(run) ? 1 : 0;
  }
  const double n = static_cast<double>(dense.results.size());
  EXPECT_GE(static_cast<double>(agree) / n, kMinTop1);
  EXPECT_LE(kl_sum / n, kMaxMeanKl);
  std::cout << "  density " << got.prefill.density() << ", decode keys " << got.decode.attended_keys << "/"
            << got.decode.context_keys << ", score " << mean_score(got) << " (dense " << mean_score(dense) << "), top-1 " << agree << "/"
            << dense.results.size() << ", KL mean " << kl_sum / n << " max " << kl_max << "\n";
}

// The cells that also run at covering settings: each path, each decode policy, both TP sizes.
bool runs_covering(Path path, Decode decode, int64_t tp) {
  return (path == Path::kResident && decode == Decode::kFull && tp == 1) ||
         (path == Path::kOffload && decode == Decode::kQuest && tp == 1) ||
         (path == Path::kOffloadTwoLanes && decode == Decode::kQuest && tp == 2) ||
         (path == Path::kOffloadTwoLanes && decode == Decode::kKeyscore && tp == 1);
}

// (prefill policy, variant)
class QualityMatrix : public ::testing::TestWithParam<std::tuple<Prefill, Variant>> {};

TEST_P(QualityMatrix, EveryPathDecodeAndTpSizeAgainstDense) {
  ASSERT_TRUE(std::filesystem::exists(retrieval_model_dir() / "model.safetensors"));
  const auto [prefill, variant] = GetParam();
  const bool dca = variant == Variant::kDca, fp8_kv = variant == Variant::kFp8Kv, yarn = variant == Variant::kYarn;
  const CellRun& dense = dense_reference(variant);
  ASSERT_EQ(dense.results.size(), prompts().size());
  ASSERT_GT(mean_score(dense), 0.99);  // the fixture retrieves every needle here: a loss below is the policy's
  if (fp8_kv && prefill == Prefill::kDense) {
    // The fp8 cache itself against the unquantized one: the same bounds as a sparse policy. Measured: every answer
    // and first token kept, first-token KL mean 6.4e-7 nats, max 1.2e-6 (the per-row e4m3 rounding of K and V).
    SCOPED_TRACE("dense, resident, tp 1: fp8 KV against the model's dtype");
    expect_close_to_dense(dense, dense_reference(Variant::kPlain));
  }
  for (int64_t tp : {1, 2}) {
    for (Decode decode : {Decode::kFull, Decode::kQuest, Decode::kKeyscore}) {
      // TP 2 runs with sparse decode only: those cells run the sparse prefill too, so TP 2 with full decode checked a
      // subset. keyscore does not score pages of Dual Chunk Attention (the engine refuses the pair).
      if ((tp == 2 && decode == Decode::kFull) || (dca && decode == Decode::kKeyscore)) continue;
      CellRun resident;  // the sparse cell on the resident path: what the offloaded ones must give
      for (Path path : {Path::kResident, Path::kOffload, Path::kOffloadTwoLanes}) {
        Cell cell{.path = path, .prefill = prefill, .decode = decode, .tp = tp, .dca = dca, .fp8_kv = fp8_kv,
                  .yarn = yarn};
        const bool plain_dense = prefill == Prefill::kDense && decode == Decode::kFull;  // covering = sparse here
        if (!plain_dense && runs_covering(path, decode, tp)) {
          cell.covering = true;
          SCOPED_TRACE(describe(cell));
          expect_dense_tokens(run(cell), dense);
        }
        cell.covering = false;
        SCOPED_TRACE(describe(cell));
        const CellRun got = path == Path::kResident && tp == 1 && plain_dense ? dense : run(cell);
        if (plain_dense) {
          expect_dense_tokens(got, dense);
          continue;
        }
        expect_engaged(cell, got);
        if (path == Path::kResident) {
          resident = got;
        } else {
          expect_same_run(got, resident);
        }
        expect_close_to_dense(got, dense);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, QualityMatrix,
                         ::testing::Combine(::testing::Values(Prefill::kDense, Prefill::kXAttention,
                                                              Prefill::kMInference, Prefill::kFlexPrefill,
                                                              Prefill::kAvgPool, Prefill::kAvgPoolBudget),
                                            ::testing::Values(Variant::kPlain, Variant::kDca, Variant::kFp8Kv,
                                                              Variant::kYarn)),
                         [](const ::testing::TestParamInfo<std::tuple<Prefill, Variant>>& info) {
                           const Variant v = std::get<1>(info.param);
                           return std::string(name(std::get<0>(info.param))) +
                                  (v == Variant::kDca     ? "_dca"
                                   : v == Variant::kFp8Kv ? "_fp8_kv"
                                   : v == Variant::kYarn  ? "_yarn"
                                                          : "");
                         });

}  // namespace
}  // namespace nanovllm::eval
