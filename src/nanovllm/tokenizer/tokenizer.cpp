#include "nanovllm/tokenizer/tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "nanovllm/core/error.h"
#include "nanovllm/core/limits.h"
#include "nanovllm/tokenizer/bpe.h"
#include "nanovllm/tokenizer/byte_level.h"
#include "nanovllm/tokenizer/normalizer.h"
#include "nanovllm/tokenizer/regex_split.h"
#include "nanovllm/tokenizer/token_index.h"
#include "nanovllm/tokenizer/tokenizer_json.h"
#include "nanovllm/tokenizer/utf8.h"

namespace nanovllm::tokenizer {

using json = nlohmann::json;

struct Tokenizer::Impl {
  std::unique_ptr<BpeModel> bpe;
  Normalizer normalizer;
  std::vector<RegexSplitter> splitters;  // applied in order; pieces of one feed the next
  std::vector<AddedToken> added;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized=false
  AddedTokenMatcher normalized_matcher;  // added tokens with normalized=true
  std::vector<int32_t> post_prefix, post_suffix;  // TemplateProcessing "single" around $A

  TokenIndex vocab;  // byte-level spelling -> id
  std::unordered_map<std::string, int32_t> added_by_content;
  // Per id, through a 4-byte slot (so sparse ids cost 4 bytes each, not a table row).
  struct IdInfo {
    size_t offset = 0;  // into id_text: the spelling, then the decoded bytes
    uint32_t token_size = 0, bytes_size = 0;
    bool special = false;
  };
  std::vector<int32_t> id_slot;  // [vocab_size] index into id_info, -1 when the id is unused
  std::vector<IdInfo> id_info;
  std::string id_text;
  std::optional<int32_t> eos, bos, pad;

  const IdInfo* info(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= id_slot.size() || id_slot[id] < 0) return nullptr;
    return &id_info[static_cast<size_t>(id_slot[id])];
  }
  std::string_view token_of(const IdInfo& info) const {
    return std::string_view(id_text).substr(info.offset, info.token_size);
  }
  std::string_view bytes_of(const IdInfo& info) const {
    return std::string_view(id_text).substr(info.offset + info.token_size, info.bytes_size);
  }
  void set_info(int32_t id, std::string_view token, bool special) {
    NANOVLLM_CHECK(token.size() <= UINT32_MAX, "tokenizer: token ", id, " is too long");
    const size_t offset = id_text.size();
    id_text.append(token);
    append_byte_level_token_bytes(id_text, token);  // what HF's ByteLevel decoder gives
    int32_t& slot = id_slot[static_cast<size_t>(id)];
    if (slot < 0) {
      slot = static_cast<int32_t>(id_info.size());
      id_info.emplace_back();
    }
    id_info[static_cast<size_t>(slot)] = IdInfo{offset, static_cast<uint32_t>(token.size()),
                                                static_cast<uint32_t>(id_text.size() - offset - token.size()), special};
  }

  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  void encode_normalized(std::string_view text, std::vector<int32_t>& out) const;
};

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  NANOVLLM_CHECK(in.good(), "tokenizer: cannot open ", path.string());
  std::string text;
  std::error_code ec;
  if (const auto size = std::filesystem::file_size(path, ec); !ec) text.reserve(size);
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) text.append(chunk, static_cast<size_t>(in.gcount()));
  return text;
}

// One entry of model.merges as written: "a b" or ["a", "b"], else an Error. Appends it to `out`'s merges.
void add_merge(const json& m, TokenizerJson& out) {
  if (m.is_string()) {
    const std::string s = m.get<std::string>();
    const size_t sp = s.find(' ');
    NANOVLLM_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                   "tokenizer.json: merge '", s, "' is not of the form 'a b'");
    out.merges.push_back({out.merge_text.size(), sp, s.size() - sp - 1});
    out.merge_text.append(s, 0, sp).append(s, sp + 1);
  } else {
    NANOVLLM_CHECK(m.is_array() && m.size() == 2, "tokenizer.json: merge entry is not 'a b' or [a, b]");
    const std::string a = m[0].get<std::string>(), b = m[1].get<std::string>();
    out.merges.push_back({out.merge_text.size(), a.size(), b.size()});
    out.merge_text.append(a).append(b);
  }
}

std::string type_of(const json& j) { return j.is_object() && j.contains("type") ? j["type"].get<std::string>() : ""; }

void parse_normalizer(const json& j, std::vector<NormalForm>& steps) {
  if (j.is_null()) return;
  const std::string t = type_of(j);
  if (t == "Sequence") {
    for (const auto& n : j.at("normalizers")) parse_normalizer(n, steps);
  } else if (t == "NFC") {
    steps.push_back(NormalForm::kNFC);
  } else if (t == "NFD") {
    steps.push_back(NormalForm::kNFD);
  } else if (t == "NFKC") {
    steps.push_back(NormalForm::kNFKC);
  } else if (t == "NFKD") {
    steps.push_back(NormalForm::kNFKD);
  } else {
    NANOVLLM_FAIL("tokenizer.json: unsupported normalizer type '", t, "'");
  }
}

std::string escape_regex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// Returns true when a ByteLevel pre-tokenizer was seen.
bool parse_pre_tokenizer(const json& j, std::vector<RegexSplitter>& splitters) {
  NANOVLLM_CHECK(!j.is_null(), "tokenizer.json: pre_tokenizer is null; only byte-level BPE is supported");
  const std::string t = type_of(j);
  if (t == "Sequence") {
    bool byte_level = false;
    for (const auto& p : j.at("pretokenizers")) {
      NANOVLLM_CHECK(!byte_level, "tokenizer.json: pre-tokenizers after ByteLevel are not supported");
      byte_level = parse_pre_tokenizer(p, splitters);
    }
    return byte_level;
  }
  if (t == "Split") {
    const std::string behavior = j.value("behavior", "Isolated");
    NANOVLLM_CHECK(behavior == "Isolated", "tokenizer.json: Split behavior '", behavior, "' is not supported");
    NANOVLLM_CHECK(!j.value("invert", false), "tokenizer.json: Split with invert=true is not supported");
    const json& pat = j.at("pattern");
    if (pat.contains("Regex")) splitters.emplace_back(pat["Regex"].get<std::string>());
    else splitters.emplace_back(escape_regex(pat.at("String").get<std::string>()));
    return false;
  }
  if (t == "ByteLevel") {
    NANOVLLM_CHECK(!j.value("add_prefix_space", false),
                   "tokenizer.json: ByteLevel add_prefix_space=true is not supported");
    if (j.value("use_regex", true)) splitters.emplace_back(kGpt2Pattern);
    return true;
  }
  NANOVLLM_FAIL("tokenizer.json: unsupported pre_tokenizer type '", t, "'");
}

void parse_decoder(const json& j) {
  const std::string t = type_of(j);
  if (t == "Sequence") {
    NANOVLLM_CHECK(j.at("decoders").size() == 1, "tokenizer.json: only a ByteLevel decoder is supported");
    return parse_decoder(j["decoders"][0]);
  }
  NANOVLLM_CHECK(t == "ByteLevel", "tokenizer.json: unsupported decoder '", j.is_null() ? "null" : t,
                 "'; only ByteLevel is supported");
}

void parse_post_processor(const json& j, const Tokenizer::Impl& impl, std::vector<int32_t>& prefix,
                          std::vector<int32_t>& suffix) {
  if (j.is_null()) return;
  const std::string t = type_of(j);
  if (t == "ByteLevel") return;  // only adjusts offsets
  if (t == "Sequence") {
    for (const auto& p : j.at("processors")) parse_post_processor(p, impl, prefix, suffix);
    return;
  }
  NANOVLLM_CHECK(t == "TemplateProcessing", "tokenizer.json: unsupported post_processor '", t, "'");
  const json& specials = j.at("special_tokens");
  bool seen_a = false;
  for (const auto& piece : j.at("single")) {
    if (piece.contains("Sequence")) {
      NANOVLLM_CHECK(piece["Sequence"].at("id") == "A", "tokenizer.json: TemplateProcessing single uses $B");
      NANOVLLM_CHECK(!seen_a, "tokenizer.json: TemplateProcessing single has $A twice");
      seen_a = true;
      continue;
    }
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    NANOVLLM_CHECK(specials.contains(name), "tokenizer.json: TemplateProcessing token '", name, "' is undefined");
    for (const auto& id : specials[name].at("ids")) (seen_a ? suffix : prefix).push_back(id.get<int32_t>());
  }
}

std::optional<std::string> config_token_name(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

Tokenizer Tokenizer::from_model_dir(const std::filesystem::path& dir, int64_t model_vocab_size) {
  const auto tok_path = dir / "tokenizer.json";
  NANOVLLM_CHECK(std::filesystem::exists(tok_path), "tokenizer: ", tok_path.string(),
                 " not found (only fast-tokenizer tokenizer.json files are supported)");
  const auto cfg_path = dir / "tokenizer_config.json";
  const std::string cfg = std::filesystem::exists(cfg_path) ? read_file(cfg_path) : std::string();
  return from_json_string(read_file(tok_path), cfg, model_vocab_size);
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  return from_json_string(read_file(tokenizer_json));
}

Tokenizer Tokenizer::from_json_string(std::string_view tokenizer_json, std::string_view config_json,
                                      int64_t model_vocab_size) {
  NANOVLLM_CHECK(model_vocab_size >= 0 && model_vocab_size <= kMaxVocabSize, "tokenizer: model vocabulary size ",
                 model_vocab_size, " is outside [0, 2^24]");
  // Every id must be below this bound; `bound_what` says where it comes from.
  const int64_t bound = model_vocab_size > 0 ? model_vocab_size : kMaxVocabSize;
  const std::string bound_what = model_vocab_size > 0
                                     ? "the model's vocabulary [0, " + std::to_string(bound) + ") (config.json vocab_size)"
                                     : "[0, 2^24), the largest vocabulary supported";
  // `where()`: the file and field, for errors (only built for one).
  auto checked_id = [&](const json& v, const auto& where) -> int32_t {
    NANOVLLM_CHECK(v.is_number_integer(), where(), ": the token id must be an integer, got ", v.dump());
    const bool inside = v.is_number_unsigned() ? v.get<uint64_t>() < static_cast<uint64_t>(bound)
                                               : v.get<int64_t>() >= 0 && v.get<int64_t>() < bound;
    NANOVLLM_CHECK(inside, where(), ": token id ", v.dump(), " is outside ", bound_what);
    return static_cast<int32_t>(v.get<int64_t>());
  };
  TokenizerJson parsed;
  try {
    parsed = read_tokenizer_json(tokenizer_json);
  } catch (const json::exception& e) {
    NANOVLLM_FAIL("tokenizer.json: invalid JSON: ", e.what());
  }
  const json& j = parsed.doc;
  json cfg;
  if (!config_json.empty()) {
    try {
      cfg = json::parse(config_json);
    } catch (const json::exception& e) {
      NANOVLLM_FAIL("tokenizer_config.json: invalid JSON: ", e.what());
    }
  }
  auto impl = std::make_shared<Impl>();
  try {
    // ---- model ----
    const json& model = j.at("model");
    const std::string mtype = model.value("type", "BPE");
    NANOVLLM_CHECK(mtype == "BPE", "tokenizer.json: model type '", mtype, "' is not supported (BPE only)");
    NANOVLLM_CHECK(model.value("dropout", json()).is_null(), "tokenizer.json: BPE dropout is not supported");
    NANOVLLM_CHECK(!model.value("byte_fallback", false), "tokenizer.json: BPE byte_fallback is not supported");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      const json v = model.value(k, json());
      NANOVLLM_CHECK(v.is_null() || v.get<std::string>().empty(), "tokenizer.json: BPE ", k, " is not supported");
    }
    // model.vocab: the reader's index maps each token to its id as written; check those and store the ids.
    int32_t max_id = -1;
    NANOVLLM_CHECK(model.at("vocab").is_object(), "tokenizer.json: model.vocab must be an object");
    TokenIndex& vocab = parsed.vocab;
    NANOVLLM_CHECK(static_cast<int64_t>(vocab.size()) <= bound, "tokenizer.json: model.vocab has ", vocab.size(),
                   " tokens, more than ", bound_what, " holds");
    for (size_t k = 0; k < vocab.size(); ++k) {
      const int32_t id = checked_id(parsed.vocab_ids[static_cast<size_t>(vocab.value(k))], [&] {
        return "tokenizer.json: model.vocab['" + std::string(vocab.key(k)) + "']";
      });
      vocab.set_value(k, id);
      max_id = std::max(max_id, id);
    }
    // model.merges: the reader took the "a b" and ["a", "b"] entries of an array and set the others aside (each
    // one an error: add_merge throws for the first, as it would in file order); a merges that is not an array
    // is in the DOM as written.
    for (const auto& m : model.at("merges")) add_merge(m, parsed);
    for (const json& m : parsed.bad_merges) add_merge(m, parsed);
    std::vector<MergeRule> merges;
    merges.reserve(parsed.merges.size());
    for (const TokenizerJson::MergeSpan& m : parsed.merges) {
      merges.push_back({std::string_view(parsed.merge_text).substr(m.offset, m.left_size + m.right_size), m.left_size});
    }
    impl->bpe = std::make_unique<BpeModel>(vocab, merges, BpeOptions{model.value("ignore_merges", false)});

    // ---- pipeline ----
    std::vector<NormalForm> forms;
    parse_normalizer(j.value("normalizer", json()), forms);
    impl->normalizer = Normalizer(std::move(forms));
    NANOVLLM_CHECK(parse_pre_tokenizer(j.value("pre_tokenizer", json()), impl->splitters),
                   "tokenizer.json: the pre_tokenizer has no ByteLevel step; only byte-level BPE is supported");
    parse_decoder(j.value("decoder", json()));

    // ---- added tokens (tokenizer.json, then any extra from tokenizer_config.json) ----
    auto add_token = [&](const json& t, int32_t id) {
      AddedToken a;
      a.id = id;
      a.content = t.at("content").get<std::string>();
      a.special = t.value("special", false);
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      a.normalized = t.value("normalized", !a.special);
      a.single_word = t.value("single_word", false);
      NANOVLLM_CHECK(!a.content.empty(), "tokenizer.json: added token ", id, " is empty");
      NANOVLLM_CHECK(!find_invalid_utf8(a.content), "tokenizer.json: added token ", id, " is not valid UTF-8");
      if (impl->added_by_content.count(a.content)) return;
      impl->added_by_content.emplace(a.content, id);
      impl->added.push_back(std::move(a));
      max_id = std::max(max_id, id);
    };
    const json added_tokens = j.value("added_tokens", json::array());
    NANOVLLM_CHECK(added_tokens.is_array(), "tokenizer.json: added_tokens must be a list");
    for (size_t i = 0; i < added_tokens.size(); ++i) {
      add_token(added_tokens[i], checked_id(added_tokens[i].at("id"), [&] {
                  return "tokenizer.json: added_tokens[" + std::to_string(i) + "].id";
                }));
    }
    if (cfg.is_object() && cfg.contains("added_tokens_decoder")) {
      NANOVLLM_CHECK(cfg["added_tokens_decoder"].is_object(),
                     "tokenizer_config.json: added_tokens_decoder must be an object");
      for (const auto& [key, t] : cfg["added_tokens_decoder"].items()) {
        const std::string where = "tokenizer_config.json: added_tokens_decoder['" + key + "']";
        const bool digits = !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
        NANOVLLM_CHECK(digits, where, ": the key must be a token id");
        add_token(t, checked_id(json(std::stoll(key)), [&] { return where; }));
      }
    }

    // ---- id tables ----
    impl->id_slot.assign(static_cast<size_t>(max_id + 1), -1);
    impl->id_info.reserve(vocab.size() + impl->added.size());
    impl->id_text.reserve(2 * vocab.text_size() + 64 * impl->added.size());
    for (size_t k = 0; k < vocab.size(); ++k) {
      const int32_t id = vocab.value(k);
      // Two tokens with one id: the one that sorts last wins, as when the vocab was read in key order.
      const Impl::IdInfo* have = impl->info(id);
      if (have != nullptr && vocab.key(k) < impl->token_of(*have)) continue;
      impl->set_info(id, vocab.key(k), false);
    }
    impl->vocab = std::move(vocab);
    std::vector<std::string> raw_pats, norm_pats;
    std::vector<const AddedToken*> raw_toks, norm_toks;
    for (const AddedToken& a : impl->added) {
      impl->set_info(a.id, a.content, a.special);
      if (a.normalized) {
        std::string p;
        impl->normalizer.normalize(a.content, p);
        norm_pats.push_back(std::move(p));
        norm_toks.push_back(&a);
      } else {
        raw_pats.push_back(a.content);
        raw_toks.push_back(&a);
      }
    }
    impl->raw_matcher = AddedTokenMatcher(std::move(raw_pats), std::move(raw_toks));
    impl->normalized_matcher = AddedTokenMatcher(std::move(norm_pats), std::move(norm_toks));

    parse_post_processor(j.value("post_processor", json()), *impl, impl->post_prefix, impl->post_suffix);

    auto lookup = [&](const char* key) -> std::optional<int32_t> {
      const auto name = config_token_name(cfg, key);
      if (!name) return std::nullopt;
      if (auto it = impl->added_by_content.find(*name); it != impl->added_by_content.end()) return it->second;
      if (const int32_t id = impl->vocab.find(*name); id >= 0) return id;
      return std::nullopt;
    };
    impl->eos = lookup("eos_token");
    impl->bos = lookup("bos_token");
    impl->pad = lookup("pad_token");
  } catch (const json::exception& e) {
    NANOVLLM_FAIL("tokenizer.json: unexpected structure: ", e.what());
  }
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::encode_normalized(std::string_view text, std::vector<int32_t>& out) const {
  // Pre-tokenize through every splitter, then BPE each word.
  std::vector<std::string_view> pieces, next;
  pieces.push_back(text);
  for (const RegexSplitter& s : splitters) {
    next.clear();
    for (std::string_view p : pieces) s.split(p, next);
    pieces.swap(next);
  }
  for (std::string_view w : pieces) bpe->encode_word(w, out);
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  std::string normalized;
  std::string_view view = text;
  if (!normalizer.is_identity()) {
    normalizer.normalize(text, normalized);
    view = normalized;
  }
  if (normalized_matcher.empty()) return encode_normalized(view, out);
  std::vector<Segment> segs;
  normalized_matcher.split(view, segs);
  for (const Segment& s : segs) {
    if (s.id >= 0) out.push_back(s.id);
    else encode_normalized(view.substr(s.begin, s.end - s.begin), out);
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  if (const auto bad = find_invalid_utf8(text)) {
    NANOVLLM_FAIL("tokenizer: input is not valid UTF-8 at byte ", *bad, " (of ", text.size(), ")");
  }
  const Impl& im = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special_tokens) out.insert(out.end(), im.post_prefix.begin(), im.post_prefix.end());
  if (im.raw_matcher.empty()) {
    if (!text.empty()) im.encode_text(text, out);
  } else {
    std::vector<Segment> segs;
    im.raw_matcher.split(text, segs);
    for (const Segment& s : segs) {
      if (s.id >= 0) out.push_back(s.id);
      else im.encode_text(text.substr(s.begin, s.end - s.begin), out);
    }
  }
  if (add_special_tokens) out.insert(out.end(), im.post_suffix.begin(), im.post_suffix.end());
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& im = *impl_;
  std::string bytes;
  for (int32_t id : ids) {
    const Impl::IdInfo* info = im.info(id);
    if (info == nullptr || (skip_special_tokens && info->special)) continue;
    bytes += im.bytes_of(*info);
  }
  std::string out;
  out.reserve(bytes.size());
  append_utf8_lossy(out, bytes);
  return out;
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(impl_->id_slot.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(std::string(token)); it != impl_->added_by_content.end()) {
    return it->second;
  }
  if (const int32_t id = impl_->vocab.find(token); id >= 0) return id;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  const Impl::IdInfo* info = impl_->info(id);
  if (info == nullptr) return std::nullopt;
  return std::string(impl_->token_of(*info));
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  const Impl::IdInfo* info = impl_->info(id);
  return info == nullptr ? std::string_view() : impl_->bytes_of(*info);
}

bool Tokenizer::is_special(int32_t id) const {
  const Impl::IdInfo* info = impl_->info(id);
  return info != nullptr && info->special;
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::pad_token_id() const { return impl_->pad; }

}  // namespace nanovllm::tokenizer
