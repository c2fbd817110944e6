// Token ids a tokenizer file may hold: below the model's vocab_size when a model is given, below 2^24
// otherwise, each error naming the file and the field. An added-token id of 5e7 used to make the loader
// allocate 3.5 GB (one table row per id up to the largest), 1e9 ended in std::bad_alloc, and 1e12 was
// silently truncated to 32 bits.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <nlohmann/json.hpp>

#include "nanovllm/core/error.h"
#include "nanovllm/tokenizer/tokenizer.h"
#include "support/expect_error.h"
#include "tokenizer_fixture.h"

namespace nanovllm::tokenizer {
namespace {

using nanovllm::testing::expect_error;
using testing::byte_token;

// A minimal byte-level BPE tokenizer.json: the 256 byte tokens (ids 0-255) and one added token.
nlohmann::json tokenizer_with_added_id(const nlohmann::json& added_id) {
  nlohmann::json vocab = nlohmann::json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[byte_token(b)] = static_cast<int>(b);
  return {{"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"post_processor", nullptr},
          {"added_tokens", {{{"id", added_id}, {"content", "<|end|>"}, {"special", true}}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
}

long max_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST(TokenizerLimits, HugeAddedTokenIdsAreErrorsNamingTheField) {
  for (const nlohmann::json& id : {nlohmann::json(50'000'000), nlohmann::json(1'000'000'000),
                                   nlohmann::json(1'000'000'000'000LL), nlohmann::json(-5)}) {
    SCOPED_TRACE(id.dump());
    expect_error([&] { Tokenizer::from_json_string(tokenizer_with_added_id(id).dump()); },
                 {"tokenizer.json", "added_tokens[0].id", id.dump(), "2^24"});
  }
  expect_error([&] { Tokenizer::from_json_string(tokenizer_with_added_id("300").dump()); },
               {"tokenizer.json", "added_tokens[0].id", "integer"});
}

TEST(TokenizerLimits, IdsMustFitTheModelVocabulary) {
  const std::string text = tokenizer_with_added_id(300).dump();
  EXPECT_EQ(Tokenizer::from_json_string(text, {}, 301).vocab_size(), 301);
  expect_error([&] { Tokenizer::from_json_string(text, {}, 300); },
               {"tokenizer.json", "added_tokens[0].id", "300", "vocab_size"});
  expect_error([&] { Tokenizer::from_json_string(text, {}, 200); },
               {"tokenizer.json", "model.vocab", "vocab_size"});
  // tokenizer_config.json's added_tokens_decoder is bounded the same way.
  const std::string cfg = R"({"added_tokens_decoder": {"70000000": {"content": "<x>", "special": true}}})";
  expect_error([&] { Tokenizer::from_json_string(text, cfg); },
               {"tokenizer_config.json", "added_tokens_decoder['70000000']", "2^24"});
  expect_error([&] { Tokenizer::from_json_string(text, R"({"added_tokens_decoder": {"x1": {"content": "<x>"}}})"); },
               {"tokenizer_config.json", "added_tokens_decoder['x1']"});
}

TEST(TokenizerLimits, SparseIdsCostLittleMemory) {
  // The largest id allowed without a model, 2^24 - 1, far from the others: per-id tables would take
  // ~1 GB (two strings and two flags per id); the id -> slot table takes 64 MB.
  const long before = max_rss_kib();
  const Tokenizer tok = Tokenizer::from_json_string(tokenizer_with_added_id((1 << 24) - 1).dump());
  EXPECT_EQ(tok.vocab_size(), 1 << 24);
  EXPECT_EQ(tok.decode(std::vector<int32_t>{(1 << 24) - 1, 'h', 'i'}), "<|end|>hi");
  EXPECT_LT(max_rss_kib() - before, 256L * 1024) << "KiB";
}

}  // namespace
}  // namespace nanovllm::tokenizer
