// Saving first-token logprob lists and comparing them with a reference run's (tools/eval/first_token_kl.h):
// the prompt fingerprint is FNV-1a 64 (published test vectors), lists survive the JSON round trip bit for
// bit, samples match by (row, context, index), and every way a reference can be unusable is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "eval/first_token_kl.h"
#include "eval/kl.h"
#include "support/expect_error.h"
#include "support/process_scratch_dir.h"

namespace nanovllm::eval {
namespace {

using nanovllm::testing::expect_error;

const std::filesystem::path& scratch() {
  static const nanovllm::testing::ProcessScratchDir dir("nanovllm-first-token-kl");
  return dir.path();
}

TEST(EvalFirstTokenKl, FingerprintIsFnv1aOverTheIdsBytes) {
  EXPECT_EQ(prompt_fingerprint({}), 0xcbf29ce484222325ull);  // the offset basis
  // Bytes "abcd" (0x64636261 little-endian); FNV-1a 64 of "abcd", computed with an independent script.
  EXPECT_EQ(prompt_fingerprint({0x64636261}), 0xfc179f83ee0724ddull);
  // Bytes 01 00 00 00 2c 01 00 00.
  EXPECT_EQ(prompt_fingerprint({1, 300}), 0x130bdb3fb4324e73ull);
  EXPECT_NE(prompt_fingerprint({1, 300}), prompt_fingerprint({300, 1}));
}

FirstToken token(const std::string& row, int64_t context, int64_t index, std::vector<TokenLogprob> lps,
                 uint64_t fingerprint = 42) {
  return {{row, context, index}, fingerprint, std::move(lps)};
}

// Writes a --json-out-like file with `tokens` as its samples' first tokens.
std::string write_reference(const std::string& name, const std::string& command, int64_t k,
                            const std::vector<FirstToken>& tokens) {
  nlohmann::ordered_json j;
  j["command"] = command;
  j["first_token_logprobs"] = k;
  j["samples"] = nlohmann::ordered_json::array();
  for (const FirstToken& t : tokens)
    j["samples"].push_back({{"task", t.key.row},
                            {"context", t.key.context},
                            {"index", t.key.index},
                            {"first_token", first_token_json(t)}});
  const auto path = scratch() / name;
  std::ofstream(path) << j.dump(1);
  return path.string();
}

TEST(EvalFirstTokenKl, ListsSurviveTheJsonRoundTrip) {
  const FirstToken t = token("niah_single_2", 4096, 3, {{17, -0.0123456789f}, {5, -4.56789e-7f}, {300, -20.5f}},
                             0xfedcba9876543210ull);
  const FirstTokenReference ref = load_first_token_reference(write_reference("round.json", "ruler", 3, {t}));
  EXPECT_EQ(ref.command, "ruler");
  EXPECT_EQ(ref.k, 3);
  ASSERT_EQ(ref.samples.size(), 1u);
  const FirstToken& back = ref.samples.begin()->second;
  EXPECT_EQ(back.key, t.key);
  EXPECT_EQ(back.prompt_fingerprint, t.prompt_fingerprint);
  ASSERT_EQ(back.logprobs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.logprobs[i].id, t.logprobs[i].id);
    EXPECT_EQ(back.logprobs[i].logprob, t.logprobs[i].logprob);  // bit for bit: the same run compares to 0
  }
  EXPECT_EQ(first_token_json(t)["prompt_fingerprint"], "fedcba9876543210");
}

TEST(EvalFirstTokenKl, ComparesMatchedSamplesPerContext) {
  const std::vector<TokenLogprob> a = {{1, std::log(0.5f)}, {2, std::log(0.3f)}, {3, std::log(0.1f)}};
  const std::vector<TokenLogprob> b = {{1, std::log(0.4f)}, {2, std::log(0.2f)}, {4, std::log(0.3f)}};
  const std::vector<TokenLogprob> c = {{2, std::log(0.6f)}, {1, std::log(0.3f)}};
  const std::string ref = write_reference("ref.json", "ruler", 3,
                                          {token("vt", 1024, 0, a), token("vt", 1024, 1, a), token("vt", 2048, 0, a),
                                           token("fwe", 2048, 0, a)});
  // vt at 1024 #0 identical, #1 differs (b), vt at 2048 #0 has another argmax (c); fwe is not in this run,
  // and this run's cwe sample is not in the reference.
  const std::vector<FirstToken> run = {token("vt", 1024, 0, a), token("vt", 1024, 1, b), token("vt", 2048, 0, c),
                                       token("cwe", 2048, 0, a)};
  const FirstTokenKl kl =
      compare_first_tokens(load_first_token_reference(ref), "ruler", run, {1024, 2048}, 2);
  const double kl_ab = partition_kl_lower_bound(a, b), kl_ac = partition_kl_lower_bound(a, c);
  EXPECT_GT(kl_ab, 0.09);
  EXPECT_EQ(kl.k, 2);
  EXPECT_EQ(kl.reference_k, 3);
  ASSERT_EQ(kl.by_context.size(), 2u);
  EXPECT_EQ(kl.by_context[0].samples, 2);
  EXPECT_DOUBLE_EQ(kl.by_context[0].mean(), kl_ab / 2);
  EXPECT_DOUBLE_EQ(kl.by_context[0].max, kl_ab);
  EXPECT_DOUBLE_EQ(kl.by_context[0].top1_agreement(), 1.0);
  EXPECT_EQ(kl.by_context[1].samples, 1);
  EXPECT_DOUBLE_EQ(kl.by_context[1].top1_agreement(), 0.0);
  EXPECT_EQ(kl.overall.samples, 3);
  EXPECT_DOUBLE_EQ(kl.overall.mean(), (kl_ab + kl_ac) / 3);
  EXPECT_DOUBLE_EQ(kl.overall.max, std::max(kl_ab, kl_ac));
  EXPECT_NEAR(kl.overall.top1_agreement(), 2.0 / 3.0, 1e-12);
  EXPECT_EQ(kl.unmatched, 1);

  const nlohmann::ordered_json j = kl.to_json();
  EXPECT_EQ(j["K"], 2);
  EXPECT_EQ(j["contexts"]["1024"]["samples"], 2);
  EXPECT_EQ(j["overall"]["samples"], 3);
  const std::string table = kl.format();
  EXPECT_NE(table.find("top-2 lists (reference top-3)"), std::string::npos) << table;
  EXPECT_NE(table.find("66.7%"), std::string::npos) << table;
}

TEST(EvalFirstTokenKl, UnusableReferencesAreClearErrors) {
  const std::vector<TokenLogprob> a = {{1, -0.1f}};
  const std::string ref = write_reference("errors.json", "ruler", 1, {token("vt", 1024, 0, a, 7)});
  const FirstTokenReference loaded = load_first_token_reference(ref);
  expect_error([&] { check_reference_matches(loaded, "needle", {token("vt", 1024, 0, a, 7)}); },
               {"is an 'eval ruler' run; this is 'eval needle'"});
  expect_error([&] { check_reference_matches(loaded, "ruler", {token("vt", 2048, 0, a, 7)}); },
               {"none of its samples is one of this run's"});
  expect_error([&] { check_reference_matches(loaded, "ruler", {token("vt", 1024, 0, a, 8)}); },
               {"the prompt of vt at 1024 #0 differs"});
  check_reference_matches(loaded, "ruler", {token("vt", 1024, 0, a, 7)});  // fine

  const std::string no_lists = write_reference("no-lists.json", "ruler", 0, {});
  expect_error([&] { load_first_token_reference(no_lists); }, {no_lists, "--first-token-logprobs K"});
  expect_error([] { load_first_token_reference("/nonexistent/ref.json"); }, {"cannot read /nonexistent/ref.json"});
  const auto garbage = scratch() / "garbage.json";
  std::ofstream(garbage) << "{\"command\": \"ruler\", \"first_token_logprobs\": 5, \"samples\": [{\"context\": 1}]}";
  expect_error([&] { load_first_token_reference(garbage.string()); }, {"not an eval --json-out file"});
}

}  // namespace
}  // namespace nanovllm::eval
