#include "nanovllm/chat/jinja_lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "nanovllm/chat/jinja_ast.h"
#include "nanovllm/chat/utf8.h"
#include "nanovllm/core/error.h"

namespace nanovllm::chat::jinja {
namespace {

// Python str.rstrip(): removes trailing (Unicode) whitespace.
std::string rstrip_py(const std::string& s) {
  auto cps = utf8::decode(s);
  while (!cps.empty() && utf8::is_space(cps.back())) cps.pop_back();
  return utf8::encode(cps);
}

bool all_space(const std::string& s, size_t from) {
  if (from >= s.size()) return false;  // jinja's whitespace_re needs at least one character
  for (char32_t cp : utf8::decode(std::string_view(s).substr(from)))
    if (!utf8::is_space(cp)) return false;
  return true;
}

// Python "unicode-escape" decoding of a string literal body (jinja2 does exactly this).
std::string unescape(const std::string& body, const std::string& src, size_t pos) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    auto hex = [&](int n) -> char32_t {
      NANOVLLM_CHECK(i + n < body.size(), "chat template: truncated \\",
                     c, " escape in string literal at ", describe_position(src, pos));
      const std::string h = body.substr(i + 1, n);
      for (char x : h)
        NANOVLLM_CHECK(std::isxdigit(static_cast<unsigned char>(x)), "chat template: bad \\", c,
                       " escape in string literal at ", describe_position(src, pos));
      i += n;
      return static_cast<char32_t>(std::strtoul(h.c_str(), nullptr, 16));
    };
    switch (c) {
      case '\n': break;  // line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': utf8::append(out, hex(2)); break;
      case 'u': utf8::append(out, hex(4)); break;
      case 'U': utf8::append(out, hex(8)); break;
      default:
        if (c >= '0' && c <= '7') {
          int v = c - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            v = v * 8 + (body[++i] - '0');
          utf8::append(out, static_cast<char32_t>(v));
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(const std::string& src, bool trim_blocks, bool lstrip_blocks)
      : src_(src), trim_blocks_(trim_blocks), lstrip_blocks_(lstrip_blocks) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit(TokenType::kData, src_.substr(pos_), pos_);
        break;
      }
      std::string text = src_.substr(pos_, tag - pos_);
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
      if (sign == '-') {
        text = rstrip_py(text);
      } else if (sign != '+' && lstrip_blocks_ && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && all_space(text, l_pos)) text.resize(l_pos);
      }
      if (!text.empty()) emit(TokenType::kData, text, pos_);
      pos_ = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        line_starting = skip_comment(tag);
      } else {
        emit(kind == '{' ? TokenType::kVarBegin : TokenType::kBlockBegin, "", tag);
        line_starting = lex_tag(kind == '{', tag);
      }
    }
    emit(TokenType::kEof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  void emit(TokenType t, std::string text, size_t pos) {
    Token tok;
    tok.type = t;
    tok.text = std::move(text);
    tok.pos = pos;
    tokens_.push_back(std::move(tok));
  }

  [[noreturn]] void fail(const std::string& msg, size_t pos) const {
    NANOVLLM_FAIL("chat template syntax error: ", msg, " at ", describe_position(src_, pos));
  }

  // Returns whether the consumed end marker ended with a newline (jinja's line_starting).
  bool skip_comment(size_t start) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail("unterminated comment '{#'", start);
    const bool minus = end > pos_ && src_[end - 1] == '-';
    pos_ = end + 2;
    return consume_after_end(minus);
  }

  // Python's \s (Unicode whitespace) starting at p: returns the first non-space offset.
  size_t skip_space(size_t p) const {
    while (p < src_.size()) {
      const auto c = static_cast<unsigned char>(src_[p]);
      const size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      const auto cps = utf8::decode(std::string_view(src_).substr(p, len));
      if (cps.size() != 1 || !utf8::is_space(cps[0])) break;
      p += len;
    }
    return p;
  }

  bool consume_after_end(bool minus) {
    const size_t before = pos_;
    if (minus) {
      pos_ = skip_space(pos_);
    } else if (trim_blocks_ && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    return pos_ > before ? src_[pos_ - 1] == '\n' : false;
  }

  bool lex_tag(bool is_var, size_t start) {
    std::vector<char> balance;
    while (true) {
      pos_ = skip_space(pos_);
      if (pos_ >= src_.size()) fail(is_var ? "unterminated '{{'" : "unterminated '{%'", start);
      if (balance.empty()) {
        const char* end = is_var ? "}}" : "%}";
        if (src_[pos_] == '-' && src_.compare(pos_ + 1, 2, end) == 0) {
          emit(is_var ? TokenType::kVarEnd : TokenType::kBlockEnd, "", pos_);
          pos_ = skip_space(pos_ + 3);
          return pos_ > 0 && src_[pos_ - 1] == '\n';
        }
        if (src_.compare(pos_, 2, end) == 0) {
          emit(is_var ? TokenType::kVarEnd : TokenType::kBlockEnd, "", pos_);
          pos_ += 2;
          if (!is_var && trim_blocks_ && pos_ < src_.size() && src_[pos_] == '\n') {
            ++pos_;
            return true;
          }
          return false;
        }
      }
      lex_one(balance);
    }
  }

  void lex_one(std::vector<char>& balance) {
    const size_t start = pos_;
    const char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
      emit(TokenType::kName, src_.substr(start, pos_ - start), start);
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      lex_number();
      return;
    }
    if (c == '\'' || c == '"') {
      ++pos_;
      while (pos_ < src_.size() && src_[pos_] != c) pos_ += src_[pos_] == '\\' ? 2 : 1;
      if (pos_ >= src_.size()) fail("unterminated string literal", start);
      const std::string body = src_.substr(start + 1, pos_ - start - 1);
      ++pos_;
      emit(TokenType::kString, unescape(body, src_, start), start);
      return;
    }
    static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        emit(TokenType::kOp, op, start);
        pos_ += 2;
        return;
      }
    }
    static const std::string kOne = "+-/*%~[](){}<>=.:|,;";
    if (kOne.find(c) == std::string::npos) fail(std::string("unexpected character '") + c + "'", start);
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty() || balance.back() != c) fail(std::string("unexpected '") + c + "'", start);
      balance.pop_back();
    }
    emit(TokenType::kOp, std::string(1, c), start);
    ++pos_;
  }

  void lex_number() {
    const size_t start = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) ||
                                    (src_[pos_] == '_' && pos_ + 1 < src_.size() &&
                                     std::isdigit(static_cast<unsigned char>(src_[pos_ + 1])))))
        ++pos_;
    };
    digits();
    // After '.', jinja never lexes a float (x.0.1 is two subscripts).
    const bool after_dot = !tokens_.empty() && tokens_.back().type == TokenType::kOp && tokens_.back().text == ".";
    bool is_float = false;
    if (!after_dot && pos_ + 1 < src_.size() && src_[pos_] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (!after_dot && pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        is_float = true;
        pos_ = p;
        digits();
      }
    }
    std::string text;
    for (size_t i = start; i < pos_; ++i)
      if (src_[i] != '_') text += src_[i];
    Token tok;
    tok.pos = start;
    tok.text = text;
    if (is_float) {
      tok.type = TokenType::kFloat;
      tok.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      tok.type = TokenType::kInt;
      errno = 0;
      tok.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail("integer literal out of range", start);
    }
    tokens_.push_back(std::move(tok));
  }

  const std::string& src_;
  bool trim_blocks_;
  bool lstrip_blocks_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::string normalize_source(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<Token> tokenize(const std::string& source, bool trim_blocks, bool lstrip_blocks) {
  return Lexer(source, trim_blocks, lstrip_blocks).run();
}

}  // namespace nanovllm::chat::jinja
