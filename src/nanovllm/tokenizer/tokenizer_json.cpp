#include "nanovllm/tokenizer/tokenizer_json.h"

#include <climits>

#include "nanovllm/core/error.h"

namespace nanovllm::tokenizer {
namespace {

using json = nlohmann::json;

// nlohmann SAX handler. Builds the DOM the way json::parse does (a key given twice: the last value wins),
// but sends the entries of root.model.vocab and root.model.merges to the flat tables of TokenizerJson.
class Reader {
 public:
  // `entries`: a guess of how many vocab entries (and as many merges) the file holds, to size the tables once.
  Reader(TokenizerJson& out, size_t entries) : out_(out) {
    out_.vocab.reserve(entries, 8 * entries);
    out_.vocab_ids.reserve(entries);
    out_.merges.reserve(entries);
    out_.merge_text.reserve(10 * entries);
  }

  bool null() { return value(json(nullptr)); }
  bool boolean(bool v) { return value(json(v)); }
  bool number_integer(json::number_integer_t v) { return value(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return value(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return value(json(v)); }
  bool binary(json::binary_t& v) { return value(json(std::move(v))); }

  bool string(std::string& s) {
    if (pair_strings_ == 0 || pair_strings_ == 1) {  // ["a", "b"]: "a" or "b"
      if (pair_strings_ == 0) pair_left_size_ = s.size();
      out_.merge_text.append(s);
      ++pair_strings_;
      return true;
    }
    if (pair_strings_ < 0 && in(merges_)) {  // "a b": exactly one space
      const size_t sp = s.find(' ');
      if (sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos) {
        out_.merges.push_back({out_.merge_text.size(), sp, s.size() - sp - 1});
        out_.merge_text.append(s, 0, sp).append(s, sp + 1);
        return true;
      }
    }
    return value(json(std::move(s)));
  }

  bool key(std::string& k) {
    json& object = *open_.back();
    if (&object == vocab_) {
      NANOVLLM_CHECK(out_.vocab_ids.size() < INT32_MAX, "tokenizer.json: model.vocab is too large");
      out_.vocab.insert_or_assign(k, static_cast<int32_t>(out_.vocab_ids.size()));
      out_.vocab_ids.emplace_back();
      slot_ = &out_.vocab_ids.back();
      return true;
    }
    // A key given again replaces its value: drop what was streamed for it.
    next_ = Next::kOther;
    if (open_.size() == 1 && k == "model") {
      next_ = Next::kModel;
      clear_vocab();
      clear_merges();
    } else if (&object == model_ && k == "vocab") {
      next_ = Next::kVocab;
      clear_vocab();
    } else if (&object == model_ && k == "merges") {
      next_ = Next::kMerges;
      clear_merges();
    }
    slot_ = &object[std::move(k)];
    return true;
  }

  bool start_object(std::size_t) {
    const Next next = take_next();
    json* object = place(json::object());
    open_.push_back(object);
    if (next == Next::kModel) model_ = object;
    if (next == Next::kVocab) vocab_ = object;
    return true;
  }

  bool end_object() {
    const json* closed = open_.back();
    open_.pop_back();
    if (closed == model_) model_ = nullptr;
    if (closed == vocab_) vocab_ = nullptr;
    return true;
  }

  bool start_array(std::size_t) {
    if (pair_strings_ < 0 && in(merges_)) {  // maybe a ["a", "b"] merge: read its strings first
      pair_strings_ = 0;
      pair_offset_ = out_.merge_text.size();
      return true;
    }
    const Next next = take_next();
    json* array = place(json::array());
    open_.push_back(array);
    if (next == Next::kMerges) merges_ = array;
    return true;
  }

  bool end_array() {
    if (pair_strings_ == 2) {
      out_.merges.push_back({pair_offset_, pair_left_size_, out_.merge_text.size() - pair_offset_ - pair_left_size_});
      pair_strings_ = -1;
      return true;
    }
    spill_pair();  // [] or ["a"]: closed below like any array
    const json* closed = open_.back();
    open_.pop_back();
    if (closed == merges_) merges_ = nullptr;
    return true;
  }

  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& e) {
    throw e;
  }

 private:
  // What the next value is, from its key.
  enum class Next { kOther, kModel, kVocab, kMerges };

  bool in(const json* container) const { return container != nullptr && open_.back() == container; }

  Next take_next() {
    spill_pair();
    const Next next = next_;
    next_ = Next::kOther;
    return next;
  }

  bool value(json&& v) {
    take_next();
    place(std::move(v));
    return true;
  }

  // Puts a value where the open container wants it and returns its address.
  json* place(json&& v) {
    if (open_.empty()) {
      out_.doc = std::move(v);
      return &out_.doc;
    }
    json* top = open_.back();
    if (top == merges_) {
      out_.bad_merges.push_back(std::move(v));
      return &out_.bad_merges.back();
    }
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    *slot_ = std::move(v);
    return slot_;
  }

  // The merge being read as ["a", "b"] is not that (a third string, or another value): it becomes an
  // ordinary array in bad_merges, left open for the rest of its values.
  void spill_pair() {
    if (pair_strings_ < 0) return;
    const std::string_view strings = std::string_view(out_.merge_text).substr(pair_offset_);
    json array = json::array();
    if (pair_strings_ >= 1) array.push_back(strings.substr(0, pair_left_size_));
    if (pair_strings_ == 2) array.push_back(strings.substr(pair_left_size_));
    out_.merge_text.resize(pair_offset_);
    pair_strings_ = -1;
    out_.bad_merges.push_back(std::move(array));
    open_.push_back(&out_.bad_merges.back());
  }

  void clear_vocab() {
    out_.vocab.clear();
    out_.vocab_ids.clear();
  }
  void clear_merges() {
    out_.merge_text.clear();
    out_.merges.clear();
    out_.bad_merges.clear();
  }

  TokenizerJson& out_;
  std::vector<json*> open_;  // the containers being read, outermost first
  json* slot_ = nullptr;     // where the value of the last key goes
  Next next_ = Next::kOther;
  json* model_ = nullptr;   // root.model while it is open
  json* vocab_ = nullptr;   // root.model.vocab (left empty) while it is open
  json* merges_ = nullptr;  // root.model.merges (left empty) while it is open
  // A merge read as ["a", "b"]: -1 when none, else how many of its strings are in merge_text from pair_offset_.
  int pair_strings_ = -1;
  size_t pair_offset_ = 0, pair_left_size_ = 0;
};

}  // namespace

TokenizerJson read_tokenizer_json(std::string_view text) {
  TokenizerJson out;
  // Qwen3's tokenizer.json (pretty-printed, as HF writes it) takes 75 bytes per vocab entry and merge
  // (11.4 MB for 151k of each). A wrong guess costs time (the tables regrow) or untouched reserved memory.
  Reader reader(out, text.size() / 75);
  json::sax_parse(text, &reader);
  return out;
}

}  // namespace nanovllm::tokenizer
