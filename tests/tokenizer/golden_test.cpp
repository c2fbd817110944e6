// Ids and decoded text must equal HF tokenizers' output (tests/data/tokenizer/qwen3_golden.json) exactly.
#include <gtest/gtest.h>

#include <vector>

#include "nanovllm/tokenizer/utf8.h"
#include "tokenizer_fixture.h"

namespace nanovllm::tokenizer {
namespace {

using testing::golden;
using testing::qwen3;

TEST(TokenizerGolden, EncodeDecodeMatchHf) {
  const Tokenizer& tok = qwen3();
  EXPECT_EQ(tok.vocab_size(), golden()["vocab_size"].get<int64_t>());
  size_t checked = 0;
  for (const auto& c : golden()["cases"]) {
    const std::string name = c["name"], text = c["text"];
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto got = tok.encode(text);
    EXPECT_EQ(got, want) << "case " << name;
    EXPECT_EQ(tok.encode(text, /*add_special_tokens=*/false), want) << "case " << name;  // Qwen adds nothing
    EXPECT_EQ(tok.decode(want), c["decoded"].get<std::string>()) << "case " << name;
    EXPECT_EQ(tok.decode(want, true), c["decoded_skip"].get<std::string>()) << "case " << name;
    EXPECT_EQ(tok.decode(got), c["nfc"].get<std::string>()) << "round trip, case " << name;
    ++checked;
  }
  EXPECT_GE(checked, 300u);
}

TEST(TokenizerGolden, DecodeRandomIdRunsMatchHf) {
  const Tokenizer& tok = qwen3();
  for (const auto& c : golden()["decode_cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    for (bool skip : {false, true}) {
      const std::string want = c[skip ? "decoded_skip" : "decoded"];
      EXPECT_EQ(tok.decode(ids, skip), want) << c["ids"].dump();
      // Streaming one id at a time gives the same text, and every piece is valid UTF-8 on its own.
      IncrementalDetokenizer detok(tok, skip);
      std::string streamed;
      for (int32_t id : ids) {
        const std::string piece = detok.add(id);
        EXPECT_FALSE(find_invalid_utf8(piece).has_value()) << c["ids"].dump();
        EXPECT_LE(detok.pending_bytes(), 3u);
        streamed += piece;
      }
      streamed += detok.finish();
      EXPECT_EQ(streamed, want) << "streamed " << c["ids"].dump();
    }
  }
}

TEST(TokenizerGolden, AddedTokenFlagsMatchHf) {
  // The same Qwen3 tokenizer plus added tokens using lstrip / rstrip / single_word / normalized.
  auto j = nlohmann::json::parse(testing::read_text(testing::qwen3_dir() + "/tokenizer.json"));
  for (const auto& a : golden()["variant"]["added_tokens"]) j["added_tokens"].push_back(a);
  const Tokenizer tok = Tokenizer::from_json_string(j.dump());
  for (const auto& c : golden()["variant"]["cases"]) {
    const std::string text = c["text"];
    EXPECT_EQ(tok.encode(text), c["ids"].get<std::vector<int32_t>>()) << "text: " << text;
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>()) << "text: " << text;
    EXPECT_EQ(tok.decode(ids, true), c["decoded_skip"].get<std::string>()) << "text: " << text;
  }
}

}  // namespace
}  // namespace nanovllm::tokenizer
