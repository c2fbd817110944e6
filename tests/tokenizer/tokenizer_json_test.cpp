// The SAX reader of tokenizer.json (tokenizer_json.h) against json::parse, the reference it replaced: on the
// same text both fail with the same message, or the reader's DOM with its streamed vocab and merges put back
// equals json::parse's result. Then the loader on what only the reader sees: keys given twice, bad merges.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "nanovllm/tokenizer/tokenizer.h"
#include "nanovllm/tokenizer/tokenizer_json.h"
#include "support/expect_error.h"
#include "tokenizer_fixture.h"

namespace nanovllm::tokenizer {
namespace {

using json = nlohmann::json;
using nanovllm::testing::expect_error;
using testing::byte_token;

// A small byte-level BPE tokenizer.json: the 256 byte tokens, "ab" (256) and "abc" (257), merges in both
// forms, and whatever `vocab_extra` / `model_extra` add (JSON text, each starting with a comma).
std::string tokenizer_text(const std::string& vocab_extra = "", const std::string& model_extra = "",
                           const std::string& merges = R"(["a b", ["ab", "c"]])") {
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[byte_token(b)] = static_cast<int>(b);
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  std::string v = vocab.dump();
  v.pop_back();
  return R"({"added_tokens": [{"id": 300, "content": "<|end|>", "special": true}], "normalizer": null,
             "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false}, "decoder": {"type": "ByteLevel"},
             "post_processor": null, "model": {"type": "BPE", "vocab": )" +
         v + vocab_extra + "}, \"merges\": " + merges + model_extra + "}}";
}

// The reader's result as one json: the vocab put back as an object, then the merges as ["a", "b"] pairs
// followed by the entries of neither form. Streamed entries must belong to the model.vocab / model.merges
// that the DOM ends up with.
json reassemble(const TokenizerJson& r) {
  json j = r.doc;
  const bool has_model = j.is_object() && j.contains("model") && j["model"].is_object();
  const bool has_vocab = has_model && j["model"].contains("vocab") && j["model"]["vocab"].is_object();
  const bool has_merges = has_model && j["model"].contains("merges") && j["model"]["merges"].is_array();
  if (!has_vocab) {
    EXPECT_TRUE(r.vocab.size() == 0 && r.vocab_ids.empty()) << "vocab entries without a vocab";
  }
  if (!has_merges) {
    EXPECT_TRUE(r.merges.empty() && r.bad_merges.empty()) << "merges without model.merges";
  }
  if (!has_model) return j;
  json& model = j["model"];
  if (has_vocab) {
    for (size_t k = 0; k < r.vocab.size(); ++k) {
      model["vocab"][std::string(r.vocab.key(k))] = r.vocab_ids[static_cast<size_t>(r.vocab.value(k))];
    }
  }
  if (has_merges) {
    const std::string_view text = r.merge_text;
    for (const TokenizerJson::MergeSpan& m : r.merges) {
      model["merges"].push_back({text.substr(m.offset, m.left_size), text.substr(m.offset + m.left_size, m.right_size)});
    }
    for (const json& m : r.bad_merges) model["merges"].push_back(m);
  }
  return j;
}

// json::parse's result in the same shape: "a b" merges as pairs, the entries of neither form moved last.
json normalized(json j) {
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) return j;
  json& model = j["model"];
  if (!model.contains("merges") || !model["merges"].is_array()) return j;
  json good = json::array(), bad = json::array();
  for (const json& m : model["merges"]) {
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos) {
        good.push_back({s.substr(0, sp), s.substr(sp + 1)});
        continue;
      }
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      good.push_back(m);
      continue;
    }
    bad.push_back(m);
  }
  for (json& m : bad) good.push_back(std::move(m));
  model["merges"] = std::move(good);
  return j;
}

void expect_same_as_json_parse(const std::string& text) {
  json want;
  std::string want_error;
  try {
    want = normalized(json::parse(text));
  } catch (const json::exception& e) {
    want_error = e.what();
  }
  try {
    const json got = reassemble(read_tokenizer_json(text));
    EXPECT_EQ(want_error, "") << "the reader accepted:\n" << text;
    EXPECT_EQ(got, want) << text;
  } catch (const json::exception& e) {
    EXPECT_EQ(e.what(), want_error) << text;
  }
}

TEST(TokenizerJson, ReadsWhatJsonParseReads) {
  const std::string base = tokenizer_text();
  for (const std::string& text : std::vector<std::string>{
           base,
           json::parse(base).dump(2),
           tokenizer_text(R"(, "ab": 270, "\u00e9\ud83d\ude00": 271, "": 272, "q\"\\": 273)"),  // a key twice, escapes
           tokenizer_text(R"(, "zz": "x", "yy": 1.5, "xx": {"a": [1, {"b": null}]}, "ww": [], "vv": -3)"),
           tokenizer_text("", R"(, "vocab": {"a": 1})"),   // model.vocab twice: the last wins
           tokenizer_text("", R"(, "vocab": "x")"),
           tokenizer_text("", R"(, "merges": ["b c"])"),  // model.merges twice
           tokenizer_text("", R"(, "merges": "a b")"),
           tokenizer_text("", R"(, "merges": [[1]])"),
           tokenizer_text("", "", R"(["ab", " ", "a b c", ["a"], [], ["a", "b", "c"], ["a", 1], [1, "a"], [["a"], "b"],
                                     ["a", {"k": [1, 2]}], {"a": "b"}, 7, null, true, ["a", "b"], "ab c"])"),
           tokenizer_text("", "", R"({"x": "a b"})"),
           tokenizer_text("", "", "null"),
           R"({"model": {"vocab": [1], "merges": {}}, "vocab": {"a": 1}, "merges": [1]})",
           R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "model": {"vocab": {"b": 1}}})",
           R"({"model": {"vocab": {"a": 0}, "merges": [["a", "b"]]}, "model": 5})",
           R"({"model": {"vocab": {"a": 0}, "merges": [["a", "b"], 1]}, "model": {"type": "BPE"}})",
           R"({"other": {"model": {"vocab": {"x": "y"}, "merges": [1]}}, "model": {"x": {"vocab": {"q": 1}}}})",
           R"([{"model": {"vocab": {"a": 0}}}])", "5", "\"x\"", "null", "",
           base + " x", base.substr(0, base.size() / 2), base.substr(0, base.size() - 30), R"({"a": 1,})",
           R"({"model": {"merges": [["a" "b"]]}})", R"({"model": {"merges": [["a", "b",]]}})",
           R"({"model": {"vocab": {"a": 01}}})", R"({"model": {"vocab": {"a\q": 1}}})",
           R"({"model": {"vocab": {"a": 1 /* c */}}})", std::string(R"({"model": {"vocab": {"a)") + "\xff" + R"(": 1}}})",
       }) {
    expect_same_as_json_parse(text);
  }
  // Random edits (deletions, insertions of JSON pieces) of a small file, seeded.
  const std::vector<std::string> pieces = {"{", "}", "[", "]", "\"", ",", ":", " ", "0", "7", "-", ".", "\\",
                                           "null", "true", "\"model\"", "\"vocab\"", "\"merges\"", "\"a b\"",
                                           "[\"a\", \"b\"]", "[\"a\"]", "{\"k\": 1}", "\"x\""};
  std::mt19937 rng(44);
  const std::string small = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "c": 3},
                                "merges": ["a b", ["ab", "c"], ["b", "c"]]}, "decoder": null})";
  for (int i = 0; i < 3000; ++i) {
    std::string text = small;
    for (int edits = 1 + static_cast<int>(rng() % 3); edits > 0; --edits) {
      const size_t pos = rng() % (text.size() + 1);
      if (rng() % 3 == 0) text.erase(pos, 1 + rng() % 3);
      else text.insert(pos, pieces[rng() % pieces.size()]);
    }
    expect_same_as_json_parse(text);
  }
}

TEST(TokenizerJson, InvalidJsonIsAnErrorWithItsPosition) {
  expect_error([] { Tokenizer::from_json_string(R"({"model": {"vocab": {"a": 0,}}})"); },
               {"tokenizer.json: invalid JSON", "line 1, column 29", "unexpected '}'"});
}

TEST(TokenizerJson, KeysGivenTwiceKeepTheirLastValue) {
  const Tokenizer tok = Tokenizer::from_json_string(tokenizer_text(R"(, "ab": 258)"));
  EXPECT_EQ(tok.token_to_id("ab"), 258);
  EXPECT_EQ(tok.id_to_token(256), std::nullopt);
  EXPECT_EQ(tok.encode("ab", false), (std::vector<int32_t>{258}));
  // model.vocab given again: the first one is gone (and with it the byte tokens).
  expect_error([] { Tokenizer::from_json_string(tokenizer_text("", R"(, "vocab": {"a": 0})")); },
               {"tokenizer.json", "no token for byte"});
}

TEST(TokenizerJson, TwoTokensWithOneIdDecodeAsTheOneSortingLast) {
  // Whatever their order in the file (the loader once read the vocab in key order; HF leaves it open).
  for (const std::string extra : {R"(, "zz": 258, "yy": 258)", R"(, "yy": 258, "zz": 258)"}) {
    const Tokenizer tok = Tokenizer::from_json_string(tokenizer_text(extra));
    EXPECT_EQ(tok.id_to_token(258), "zz") << extra;
    EXPECT_EQ(tok.token_to_id("yy"), 258);
    EXPECT_EQ(tok.decode(std::vector<int32_t>{258}), "zz");
  }
}

TEST(TokenizerJson, BadMergeEntriesAreErrors) {
  auto load = [](const std::string& merges) { return [=] { Tokenizer::from_json_string(tokenizer_text("", "", merges)); }; };
  expect_error(load(R"(["a b", "abc"])"), {"tokenizer.json: merge 'abc' is not of the form 'a b'"});
  expect_error(load(R"(["a b", "a b c"])"), {"merge 'a b c' is not of the form 'a b'"});
  for (const std::string bad : {R"(["a"])", R"([])", R"(["a", "b", "c"])", "7", "null", R"({"a": "b"})"}) {
    expect_error(load(R"(["a b", )" + bad + "]"), {"tokenizer.json: merge entry is not 'a b' or [a, b]"});
  }
  expect_error(load(R"([["a", 1]])"), {"tokenizer.json: unexpected structure", "type must be string"});
  // A bad entry is reported before a merge of unknown tokens, wherever it is.
  expect_error(load(R"(["x y", "ab"])"), {"merge 'ab' is not of the form 'a b'"});
  expect_error(load(R"(["a b", ["ab", "x"]])"), {"tokenizer.json: merge #1 'ab x' produces a token missing"});
  expect_error(load(R"(["a b", ["zz", "c"]])"), {"tokenizer.json: merge #1 'zz c' uses a token missing"});
}

}  // namespace
}  // namespace nanovllm::tokenizer
