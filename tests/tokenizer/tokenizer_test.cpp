// Behaviour checks that do not need the golden file: special tokens, streaming detokenization of split
// characters, invalid input, unsupported configs, thread safety.
#include <gtest/gtest.h>

#include <thread>

#include "nanovllm/core/error.h"
#include "nanovllm/tokenizer/utf8.h"
#include "tokenizer_fixture.h"

namespace nanovllm::tokenizer {
namespace {

using testing::qwen3;
using testing::byte_token;

int32_t byte_id(const Tokenizer& tok, unsigned b) {
  const auto id = tok.token_to_id(byte_token(b));
  EXPECT_TRUE(id.has_value()) << "byte " << b;
  return id.value_or(-1);
}

TEST(Tokenizer, SpecialTokensAndSkip) {
  const Tokenizer& tok = qwen3();
  const auto im_start = tok.token_to_id("<|im_start|>"), im_end = tok.token_to_id("<|im_end|>");
  ASSERT_TRUE(im_start && im_end);
  EXPECT_EQ(*im_start, 151644);
  EXPECT_EQ(*im_end, 151645);
  EXPECT_EQ(tok.eos_token_id(), im_end);            // tokenizer_config.json eos_token
  EXPECT_EQ(tok.pad_token_id(), tok.token_to_id("<|endoftext|>"));
  EXPECT_FALSE(tok.bos_token_id().has_value());     // Qwen has no BOS
  EXPECT_TRUE(tok.is_special(*im_start));
  EXPECT_FALSE(tok.is_special(*tok.token_to_id("<think>")));  // added, but not special

  const auto ids = tok.encode("<|im_start|>user\nhi there<|im_end|>");
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), *im_start);
  EXPECT_EQ(ids.back(), *im_end);
  EXPECT_EQ(tok.decode(ids), "<|im_start|>user\nhi there<|im_end|>");
  EXPECT_EQ(tok.decode(ids, /*skip_special_tokens=*/true), "user\nhi there");
  // Non-special added tokens survive skip_special_tokens.
  EXPECT_EQ(tok.decode(tok.encode("<think>x</think>"), true), "<think>x</think>");
  // A special token's text split by a space is ordinary text.
  for (int32_t id : tok.encode("<|im_start |>")) EXPECT_FALSE(tok.is_special(id));
  EXPECT_EQ(tok.encode(""), std::vector<int32_t>{});
  // Ids outside the vocabulary (the model's padded embedding rows) decode to nothing.
  const std::vector<int32_t> padded = {tok.encode("a")[0], 151900, -1, 1 << 30};
  EXPECT_EQ(tok.decode(padded), "a");
  EXPECT_EQ(tok.id_to_token(*im_end), "<|im_end|>");
  EXPECT_EQ(tok.id_to_token(tok.encode(" hello")[0]), "Ġhello");
}

TEST(Tokenizer, DetokenizerHoldsSplitCharacters) {
  const Tokenizer& tok = qwen3();
  // 😀 = F0 9F 98 80, fed one byte-token at a time: nothing until the 4th byte.
  IncrementalDetokenizer d(tok);
  const unsigned emoji[] = {0xF0, 0x9F, 0x98, 0x80};
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(d.add(byte_id(tok, emoji[k])), "");
    EXPECT_EQ(d.pending_bytes(), static_cast<size_t>(k + 1));
  }
  EXPECT_EQ(d.add(byte_id(tok, emoji[3])), "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.pending_bytes(), 0u);

  // 中 = E4 B8 AD after ASCII: the ASCII goes out at once, the CJK char when complete.
  EXPECT_EQ(d.add(tok.encode("ok")), "ok");
  EXPECT_EQ(d.add(byte_id(tok, 0xE4)), "");
  EXPECT_EQ(d.add(byte_id(tok, 0xB8)), "");
  EXPECT_EQ(d.add(byte_id(tok, 0xAD)), "\xE4\xB8\xAD");

  // A dangling partial character becomes U+FFFD at finish(); a stray continuation byte at once.
  EXPECT_EQ(d.add(byte_id(tok, 0xF0)), "");
  EXPECT_EQ(d.finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(d.add(byte_id(tok, 0x80)), "\xEF\xBF\xBD");
  // A lead byte followed by a non-continuation: the lead is invalid as soon as the next byte arrives.
  EXPECT_EQ(d.add(byte_id(tok, 0xE4)), "");
  EXPECT_EQ(d.add(byte_id(tok, 'x')), "\xEF\xBF\xBDx");
  EXPECT_EQ(d.finish(), "");

  // Real text whose tokens split characters: every step valid UTF-8, concatenation exact.
  const std::string text = "Family 👨‍👩‍👧‍👦, flags 🇯🇵🇫🇷, skin 👍🏽, 中文混合テキスト 한국어 ภาษาไทย";
  const auto ids = tok.encode(text);
  IncrementalDetokenizer s(tok);
  std::string acc;
  int held = 0;
  for (int32_t id : ids) {
    const std::string piece = s.add(id);
    EXPECT_FALSE(find_invalid_utf8(piece).has_value());
    held += s.pending_bytes() > 0;
    acc += piece;
  }
  acc += s.finish();
  EXPECT_EQ(acc, text);
  EXPECT_GT(held, 0) << "expected some tokens to carry partial characters";

  // skip_special_tokens drops specials mid-stream.
  IncrementalDetokenizer sk(tok, true);
  std::string out = sk.add(tok.encode("<|im_start|>assistant\n😀<|im_end|>"));
  out += sk.finish();
  EXPECT_EQ(out, "assistant\n😀");
}

TEST(Tokenizer, InvalidUtf8IsAnError) {
  const Tokenizer& tok = qwen3();
  const std::string bad[] = {
      std::string("abc\x80"), std::string("\xC0\x80"), std::string("x\xED\xA0\x80y"),  // stray, overlong, surrogate
      std::string("\xF5\x80\x80\x80"), std::string("ok \xE4\xB8"), std::string("\xF4\x90\x80\x80"),
      std::string("a\xFF"),
  };
  for (const std::string& s : bad) {
    try {
      tok.encode(s);
      ADD_FAILURE() << "no error for invalid input of " << s.size() << " bytes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
    }
  }
  try {
    tok.encode(std::string("hello \xE4\xB8 world"));
    ADD_FAILURE() << "no error for a truncated character";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at byte 6"), std::string::npos) << e.what();
  }
  // Embedded NUL is valid UTF-8.
  EXPECT_EQ(tok.decode(tok.encode(std::string("a\0b", 3))), std::string("a\0b", 3));
}

TEST(Tokenizer, RejectsUnsupportedConfigs) {
  const std::string base =
      R"({"normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
          "decoder": {"type": "ByteLevel"}, "post_processor": null, "added_tokens": [],)";
  EXPECT_THROW(Tokenizer::from_json_string(base + R"("model": {"type": "WordPiece", "vocab": {}}})"), Error);
  EXPECT_THROW(Tokenizer::from_json_string("{not json"), Error);
  // A byte-level BPE must have all 256 byte tokens.
  EXPECT_THROW(Tokenizer::from_json_string(base + R"("model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"),
               Error);
  EXPECT_THROW(Tokenizer::from_model_dir("/nonexistent/dir"), Error);
}

TEST(Tokenizer, TinyByteLevelBpeWithTemplateAndBothMergeForms) {
  // Hand-built model: 256 byte tokens, merges "a b" and ["ab","c"] forms; a TemplateProcessing adding
  // [BOS] in front. Expected ids derived by hand.
  nlohmann::json vocab = nlohmann::json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[byte_token(b)] = static_cast<int>(b);
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  vocab["Ġab"] = 258;
  nlohmann::json j = {
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", {{{"id", 259}, {"content", "[BOS]"}, {"special", true}, {"normalized", false}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "[BOS]"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", nlohmann::json::array()},
        {"special_tokens", {{"[BOS]", {{"id", "[BOS]"}, {"ids", {259}}, {"tokens", {"[BOS]"}}}}}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", {"ab", "c"}, "Ġ ab"}}}},
  };
  const Tokenizer tok = Tokenizer::from_json_string(j.dump());
  EXPECT_EQ(tok.vocab_size(), 260);
  // "abc ab": words "abc", " ab" -> [abc], [Ġab]; BOS in front only with add_special_tokens.
  EXPECT_EQ(tok.encode("abc ab"), (std::vector<int32_t>{259, 257, 258}));
  EXPECT_EQ(tok.encode("abc ab", false), (std::vector<int32_t>{257, 258}));
  // "cab": c, then "ab".
  EXPECT_EQ(tok.encode("cab", false), (std::vector<int32_t>{'c', 256}));
  EXPECT_EQ(tok.decode(tok.encode("abc ab"), true), "abc ab");
}

TEST(Tokenizer, ConcurrentEncodeIsConsistent) {
  const Tokenizer& tok = qwen3();
  const std::string text = "Concurrent encoding 同时编码 with a shared cache, 1234567 times! 🙂\n";
  const auto want = tok.encode(text);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string s = text + std::to_string(t * 1000 + i);
        const auto ids = tok.encode(s);
        if (!std::equal(want.begin(), want.end(), ids.begin())) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace nanovllm::tokenizer
