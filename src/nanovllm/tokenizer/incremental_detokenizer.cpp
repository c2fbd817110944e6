#include "nanovllm/tokenizer/tokenizer.h"
#include "nanovllm/tokenizer/utf8.h"

namespace nanovllm::tokenizer {

std::string IncrementalDetokenizer::add(int32_t id) {
  if (!(skip_special_tokens_ && tokenizer_->is_special(id))) pending_ += tokenizer_->token_bytes(id);
  return drain(false);
}

std::string IncrementalDetokenizer::add(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    if (!(skip_special_tokens_ && tokenizer_->is_special(id))) pending_ += tokenizer_->token_bytes(id);
  }
  return drain(false);
}

std::string IncrementalDetokenizer::finish() { return drain(true); }

std::string IncrementalDetokenizer::drain(bool final) {
  // Emit everything up to a trailing incomplete-but-so-far-valid sequence. Whether a sequence is valid or
  // invalid never depends on bytes after it, so emitting early matches the lossy decode of the whole.
  const auto* p = reinterpret_cast<const unsigned char*>(pending_.data());
  const size_t n = pending_.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) { ++i; continue; }
    const Utf8Step st = next_utf8(p + i, n - i);
    if (st.status == Utf8Status::kIncomplete && !final) break;
    i += st.len;
  }
  std::string out;
  append_utf8_lossy(out, std::string_view(pending_).substr(0, i));
  pending_.erase(0, i);
  return out;
}

}  // namespace nanovllm::tokenizer
