#define PCRE2_CODE_UNIT_WIDTH 8
#include "nanovllm/tokenizer/regex_split.h"

#include <pcre2.h>

#include "nanovllm/core/error.h"

namespace nanovllm::tokenizer {
namespace {

// Unicode White_Space, as a class body.
constexpr const char* kWhiteSpaceBody =
    R"(\x{09}-\x{0D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string translate_regex(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[i + 1];
      if (d == 's') {
        out += in_class ? std::string(kWhiteSpaceBody) : "[" + std::string(kWhiteSpaceBody) + "]";
      } else if (d == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceBody) + "]";
      } else {
        out += c;
        out += d;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' or '^]' right after '[' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') { out += '^'; ++i; }
      if (i + 1 < p.size() && p[i + 1] == ']') { out += ']'; ++i; }
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct RegexSplitter::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(const std::string& pattern) : impl_(std::make_unique<Impl>()) {
  const std::string translated = translate_regex(pattern);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  NANOVLLM_CHECK(impl_->code != nullptr, "tokenizer.json: cannot compile pre-tokenizer regex '", pattern,
                 "': ", pcre2_message(err), " at offset ", err_off);
  const int jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);
  NANOVLLM_CHECK(jit == 0, "tokenizer: PCRE2 JIT compile failed for '", pattern, "': ", pcre2_message(jit));
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;

namespace {
// Match data and a JIT stack per thread: encode() is const and may run on many threads at once.
struct ThreadMatchState {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  ThreadMatchState() { pcre2_jit_stack_assign(ctx, nullptr, stack); }
  ~ThreadMatchState() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
  }
};
}  // namespace

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  thread_local ThreadMatchState st;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t pos = 0, gap = 0;  // gap: start of the unmatched text before the next match
  while (pos < n) {
    // Input was validated once up front, so skip PCRE2's per-call UTF check.
    const int rc = pcre2_jit_match(impl_->code, subject, n, pos, PCRE2_NO_UTF_CHECK, st.md, st.ctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    NANOVLLM_CHECK(rc >= 0, "tokenizer: pre-tokenizer regex failed: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
    const size_t s = ov[0], e = ov[1];
    if (e == s) {  // empty match: step over one character
      size_t k = s + 1;
      while (k < n && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) ++k;
      pos = k;
      continue;
    }
    if (s > gap) out.push_back(text.substr(gap, s - gap));
    out.push_back(text.substr(s, e - s));
    pos = gap = e;
  }
  if (gap < n) out.push_back(text.substr(gap));
}

}  // namespace nanovllm::tokenizer
