#include "nanovllm/server/tool_parser.h"

#include <algorithm>
#include <cctype>

#include "nanovllm/grammar/compiled_grammar.h"
#include "nanovllm/grammar/json_schema.h"
#include "nanovllm/grammar/matcher.h"
#include "nanovllm/server/reasoning_parser.h"

namespace nanovllm::server {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// A byte-level JSON-object checker: the grammar engine's JSON grammar over a vocabulary of single bytes
// (built once; immutable and shared by every parser).
std::shared_ptr<const grammar::CompiledGrammar> json_object_checker() {
  static const std::shared_ptr<const grammar::CompiledGrammar> g = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
    auto vocab = std::make_shared<const grammar::TokenVocabulary>(bytes, std::vector<int32_t>{}, std::vector<int32_t>{}, 256);
    return std::make_shared<const grammar::CompiledGrammar>(grammar::compile_grammar(grammar::json_object_grammar()), vocab);
  }();
  return g;
}

// Text outside calls: content, holding back a possible start of <tool_call>; whitespace right after a call
// is dropped. Returns the position of the next <tool_call> in `buf` (npos: none), having moved the text
// before it (or all that is safe) into `out`.
size_t take_text(std::string& buf, bool& skip_space, bool final, std::string& out) {
  if (skip_space) {
    const size_t first = std::find_if(buf.begin(), buf.end(), [](char c) { return !is_space(c); }) - buf.begin();
    buf.erase(0, first);
    if (buf.empty()) return std::string::npos;
    skip_space = false;
  }
  const size_t pos = buf.find(kCallOpen);
  if (pos != std::string::npos) {
    out += buf.substr(0, pos);
    buf.erase(0, pos);
    return 0;
  }
  const size_t keep = final ? 0 : partial_tag_suffix(buf, kCallOpen);
  out += buf.substr(0, buf.size() - keep);
  buf.erase(0, buf.size() - keep);
  return std::string::npos;
}

// ---- hermes -----------------------------------------------------------------------------------------------

class HermesParser final : public ToolCallParser {
 public:
  explicit HermesParser(std::function<std::string()> new_id) : new_id_(std::move(new_id)) {}

 private:
  std::function<std::string()> new_id_;
  // buf_ (the base's): outside a call, unsent text; inside, the call's body so far.
  bool in_call_ = false, skip_space_ = false;
  // The call being streamed.
  bool name_sent_ = false, args_done_ = false, broken_ = false;
  size_t args_begin_ = 0, args_fed_ = 0, args_sent_ = 0;
  std::unique_ptr<grammar::GrammarMatcher> args_;

  void run(ToolParseOutput& out, bool final) override {
    for (;;) {
      if (!in_call_) {
        if (take_text(buf_, skip_space_, final, out.content) == std::string::npos) return;
        buf_.erase(0, kCallOpen.size());
        in_call_ = true;
        name_sent_ = args_done_ = broken_ = false;
        continue;
      }
      const size_t close = buf_.find(kCallClose);
      if (close == std::string::npos) {
        if (!final) {
          stream(buf_, out);
          return;
        }
        // Cut off inside the call.
        if (name_sent_) {
          stream(buf_, out);
          ++num_calls_;
        } else {
          out.content += std::string(kCallOpen) + buf_;
        }
        buf_.clear();
        in_call_ = false;
        return;
      }
      const std::string body = buf_.substr(0, close);
      end_call(body, out);
      buf_.erase(0, close + kCallClose.size());
      in_call_ = false;
      skip_space_ = true;
    }
  }

  // {"name": "NAME", "arguments": <- the prefix every well-formed call starts with. Returns the offset of the
  // arguments value (npos: not yet known), and sets `mismatch` when the body cannot have this form.
  static size_t scan_prefix(std::string_view body, std::string& name, bool& mismatch) {
    size_t i = 0;
    auto ws = [&] {
      while (i < body.size() && is_space(body[i])) ++i;
    };
    // Matches `lit` at i; false with mismatch unset when the body ends inside it.
    auto expect = [&](std::string_view lit) {
      const std::string_view have = body.substr(i, lit.size());
      if (!lit.starts_with(have)) {
        mismatch = true;
        return false;
      }
      if (have.size() < lit.size()) return false;
      i += lit.size();
      return true;
    };
    mismatch = false;
    ws();
    if (!expect("{")) return std::string::npos;
    ws();
    if (!expect("\"name\"")) return std::string::npos;
    ws();
    if (!expect(":")) return std::string::npos;
    ws();
    if (!expect("\"")) return std::string::npos;
    const size_t name_begin = i;
    while (i < body.size() && body[i] != '"') {
      if (body[i] == '\\' || static_cast<unsigned char>(body[i]) < 0x20) {  // escapes: left to the whole parse
        mismatch = true;
        return std::string::npos;
      }
      ++i;
    }
    if (i >= body.size()) return std::string::npos;
    name = std::string(body.substr(name_begin, i - name_begin));
    ++i;
    ws();
    if (!expect(",")) return std::string::npos;
    ws();
    if (!expect("\"arguments\"")) return std::string::npos;
    ws();
    if (!expect(":")) return std::string::npos;
    return i;  // whitespace before the value is skipped by stream()
  }

  // Sends what the body so far settles: the name once its prefix is complete, then the arguments as the
  // JSON checker accepts them.
  void stream(std::string_view body, ToolParseOutput& out) {
    if (broken_) return;
    if (!name_sent_) {
      std::string name;
      bool mismatch = false;
      const size_t begin = scan_prefix(body, name, mismatch);
      if (mismatch) broken_ = true;  // another form: decided when the call is whole
      if (begin == std::string::npos) return;
      out.calls.push_back({num_calls_, new_id_(), name, ""});
      name_sent_ = true;
      args_begin_ = args_fed_ = args_sent_ = begin;
      args_ = std::make_unique<grammar::GrammarMatcher>(json_object_checker());
    }
    while (!args_done_ && args_fed_ < body.size()) {
      if (args_fed_ == args_begin_ && is_space(body[args_fed_])) {  // before the value
        args_begin_ = args_sent_ = ++args_fed_;
        continue;
      }
      if (!args_->accept_bytes(body.substr(args_fed_, 1))) {
        broken_ = true;
        break;
      }
      ++args_fed_;
      args_done_ = args_->is_completed();
    }
    if (args_fed_ > args_sent_) {
      out.calls.push_back({num_calls_, std::nullopt, std::nullopt, std::string(body.substr(args_sent_, args_fed_ - args_sent_))});
      args_sent_ = args_fed_;
    }
  }

  // The whole body is here.
  void end_call(const std::string& body, ToolParseOutput& out) {
    if (!name_sent_) {
      // Nothing of this call was sent: check it whole, then send it whole.
      ToolParseOutput trial;
      stream(body, trial);
      if (name_sent_ && args_done_ && trim(std::string_view(body).substr(args_fed_)) == "}") {
        out.append(std::move(trial));
        ++num_calls_;
        return;
      }
      name_sent_ = false;
      parse_whole(body, out);
      return;
    }
    stream(body, out);
    ++num_calls_;
    if (!(args_done_ && trim(std::string_view(body).substr(args_fed_)) == "}")) {
      // Sent in part and then malformed: the call ends here, its unsent text is content.
      out.content += body.substr(args_sent_) + std::string(kCallClose);
    }
  }

  // Another key order or escaped names: a full JSON parse decides; anything else is content.
  void parse_whole(const std::string& body, ToolParseOutput& out) {
    const ordered_json v = ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
    const bool ok = v.is_object() && v.contains("name") && v["name"].is_string() &&
                    (!v.contains("arguments") || v["arguments"].is_object() || v["arguments"].is_string());
    if (!ok) {
      out.content += std::string(kCallOpen) + body + std::string(kCallClose);
      return;
    }
    std::string args = "{}";
    if (v.contains("arguments")) {
      const ordered_json& a = v["arguments"];
      args = a.is_string() ? a.get<std::string>() : a.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    }
    out.calls.push_back({num_calls_, new_id_(), v["name"].get<std::string>(), ""});
    out.calls.push_back({num_calls_, std::nullopt, std::nullopt, args});
    ++num_calls_;
  }
};

// ---- qwen3_coder ------------------------------------------------------------------------------------------

class Qwen3CoderParser final : public ToolCallParser {
 public:
  Qwen3CoderParser(const ordered_json& tools, std::function<std::string()> new_id)
      : tools_(tools), new_id_(std::move(new_id)) {}

 private:
  const ordered_json& tools_;
  std::function<std::string()> new_id_;
  std::string raw_;  // the call's text consumed so far (returned as content if it turns out malformed)
  bool in_call_ = false, skip_space_ = false;
  bool name_sent_ = false, function_closed_ = false;
  std::string name_;
  int64_t num_params_ = 0;

  void run(ToolParseOutput& out, bool final) override {
    for (;;) {
      if (!in_call_) {
        if (take_text(buf_, skip_space_, final, out.content) == std::string::npos) return;
        buf_.erase(0, kCallOpen.size());
        raw_ = std::string(kCallOpen);
        in_call_ = true;
        name_sent_ = function_closed_ = false;
        num_params_ = 0;
        continue;
      }
      const Step step = advance(out);
      if (step == Step::kWait) {
        if (!final) return;
        // Cut off inside the call.
        if (name_sent_) {
          if (!function_closed_) close_arguments(out);
          ++num_calls_;
        } else {
          out.content += raw_ + buf_;
        }
        buf_.clear();
        in_call_ = false;
        return;
      }
      if (step == Step::kMalformed) {
        const size_t close = buf_.find(kCallClose);
        if (close == std::string::npos && !final) return;  // its text goes to content when the call ends
        const size_t end = close == std::string::npos ? buf_.size() : close + kCallClose.size();
        if (name_sent_) {  // the call was sent in part: end it there
          if (!function_closed_) close_arguments(out);
          ++num_calls_;
          out.content += buf_.substr(0, end);
        } else {
          out.content += raw_ + buf_.substr(0, end);
        }
        buf_.erase(0, end);
        in_call_ = false;
        skip_space_ = true;
        continue;
      }
      // kCallDone
      in_call_ = false;
      skip_space_ = true;
    }
  }

  enum class Step { kWait, kMalformed, kCallDone };

  void consume(size_t n) {
    raw_ += buf_.substr(0, n);
    buf_.erase(0, n);
  }
  void skip_space() {
    size_t n = 0;
    while (n < buf_.size() && is_space(buf_[n])) ++n;
    consume(n);
  }

  // Moves through the call as far as the buffered text allows.
  Step advance(ToolParseOutput& out) {
    for (;;) {
      skip_space();
      if (buf_.empty()) return Step::kWait;
      if (!name_sent_) {
        constexpr std::string_view open = "<function=";
        if (!std::string_view(buf_).starts_with(open.substr(0, std::min(buf_.size(), open.size())))) return Step::kMalformed;
        const size_t gt = buf_.find('>');
        if (buf_.size() < open.size() || gt == std::string::npos) return Step::kWait;
        name_ = std::string(trim(std::string_view(buf_).substr(open.size(), gt - open.size())));
        if (name_.empty()) return Step::kMalformed;
        consume(gt + 1);
        out.calls.push_back({num_calls_, new_id_(), name_, ""});
        name_sent_ = true;
        continue;
      }
      const std::string_view b = buf_;
      if (function_closed_) {
        if (!b.starts_with(kCallClose.substr(0, std::min(b.size(), kCallClose.size())))) return Step::kMalformed;
        if (b.size() < kCallClose.size()) return Step::kWait;
        consume(kCallClose.size());
        ++num_calls_;
        return Step::kCallDone;
      }
      constexpr std::string_view param = "<parameter=", param_close = "</parameter>", fn_close = "</function>";
      if (b.starts_with(fn_close)) {
        consume(fn_close.size());
        close_arguments(out);
        continue;
      }
      if (b.starts_with(kCallClose)) {  // </function> left out
        close_arguments(out);
        continue;
      }
      if (b.starts_with(param)) {
        const size_t gt = b.find('>');
        const size_t end = b.find(param_close);
        if (gt == std::string::npos || end == std::string::npos) return Step::kWait;
        if (end < gt) return Step::kMalformed;
        const std::string pname(trim(b.substr(param.size(), gt - param.size())));
        std::string_view value = b.substr(gt + 1, end - gt - 1);
        if (value.starts_with("\n")) value.remove_prefix(1);
        if (value.ends_with("\n")) value.remove_suffix(1);
        if (pname.empty()) return Step::kMalformed;
        const std::string key = ordered_json(pname).dump(-1, ' ', false, ordered_json::error_handler_t::replace);
        out.calls.push_back({num_calls_, std::nullopt, std::nullopt,
                             std::string(num_params_ == 0 ? "{" : ", ") + key + ": " + typed_value(pname, value)});
        ++num_params_;
        consume(end + param_close.size());
        continue;
      }
      // A prefix of one of the tags: wait for the rest; anything else is not a call.
      for (std::string_view tag : {param, fn_close, kCallClose})
        if (tag.starts_with(b)) return Step::kWait;
      return Step::kMalformed;
    }
  }

  void close_arguments(ToolParseOutput& out) {
    out.calls.push_back({num_calls_, std::nullopt, std::nullopt, num_params_ == 0 ? "{}" : "}"});
    function_closed_ = true;
  }

  // The parameter's JSON value: its schema's type decides how the raw text reads (vLLM's qwen3_coder rules:
  // strings stay text, numbers / booleans / objects / arrays are parsed, anything unparsable is a string).
  std::string typed_value(const std::string& pname, std::string_view raw) const {
    std::string type;
    for (const ordered_json& t : tools_) {
      if (!t.is_object() || !t.contains("function")) continue;
      const ordered_json& f = t["function"];
      if (!f.is_object() || f.value("name", "") != name_) continue;
      if (f.contains("parameters") && f["parameters"].is_object() && f["parameters"].contains("properties") &&
          f["parameters"]["properties"].is_object() && f["parameters"]["properties"].contains(pname)) {
        const ordered_json& ps = f["parameters"]["properties"][pname];
        if (ps.is_object() && ps.contains("type") && ps["type"].is_string()) type = ps["type"].get<std::string>();
      }
    }
    const std::string text(raw);
    auto as_string = [&] { return ordered_json(text).dump(-1, ' ', false, ordered_json::error_handler_t::replace); };
    if (type == "string") return as_string();
    if (type == "boolean") {
      std::string lower;
      for (char c : trim(raw)) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (lower == "true" || lower == "false") return lower;
      return as_string();
    }
    const ordered_json v = ordered_json::parse(trim(raw), nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded()) return as_string();
    if ((type == "integer" || type == "number") && !v.is_number()) return as_string();
    if (type == "object" && !v.is_object()) return as_string();
    if (type == "array" && !v.is_array()) return as_string();
    if (type.empty() && !v.is_object() && !v.is_array() && !v.is_number() && !v.is_boolean() && !v.is_null())
      return as_string();
    return v.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  }
};

}  // namespace

void ToolParseOutput::append(ToolParseOutput&& o) {
  content += o.content;
  for (ToolCallDelta& d : o.calls) calls.push_back(std::move(d));
}

std::optional<ToolParserKind> tool_parser_from_name(std::string_view name) {
  if (name == "hermes") return ToolParserKind::kHermes;
  if (name == "qwen3_coder") return ToolParserKind::kQwen3Coder;
  if (name == "none") return ToolParserKind::kNone;
  return std::nullopt;
}

const char* tool_parser_name(ToolParserKind kind) {
  switch (kind) {
    case ToolParserKind::kHermes: return "hermes";
    case ToolParserKind::kQwen3Coder: return "qwen3_coder";
    case ToolParserKind::kNone: break;
  }
  return "none";
}

ToolParserKind tool_parser_for_template(std::string_view source) {
  if (source.find("<function=") != std::string_view::npos && source.find("<parameter=") != std::string_view::npos)
    return ToolParserKind::kQwen3Coder;
  if (source.find("<tool_call>") != std::string_view::npos) return ToolParserKind::kHermes;
  return ToolParserKind::kNone;
}

std::unique_ptr<ToolCallParser> make_tool_parser(ToolParserKind kind, const ordered_json& tools,
                                                 std::function<std::string()> new_id) {
  switch (kind) {
    case ToolParserKind::kHermes: return std::make_unique<HermesParser>(std::move(new_id));
    case ToolParserKind::kQwen3Coder: return std::make_unique<Qwen3CoderParser>(tools, std::move(new_id));
    case ToolParserKind::kNone: break;
  }
  return nullptr;
}

}  // namespace nanovllm::server
