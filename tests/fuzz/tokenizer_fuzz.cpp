// libFuzzer target: arbitrary bytes into encode / decode / the incremental detokenizer.
// Invariants: invalid UTF-8 -> nanovllm::Error and nothing else; valid input -> ids in range and
// decode(encode(x)) is valid UTF-8; streaming decode of arbitrary ids equals decode().
// Build and run: scripts/fuzz_tokenizer.sh [seconds]
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "nanovllm/core/error.h"
#include "nanovllm/tokenizer/tokenizer.h"
#include "nanovllm/tokenizer/utf8.h"

using nanovllm::tokenizer::IncrementalDetokenizer;
using nanovllm::tokenizer::Tokenizer;

static const Tokenizer& tok() {
  static const Tokenizer t = Tokenizer::from_model_dir(NANOVLLM_FUZZ_TOKENIZER_DIR);
  return t;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& t = tok();
  const std::string text(reinterpret_cast<const char*>(data), size);
  const bool valid = !nanovllm::tokenizer::find_invalid_utf8(text).has_value();
  std::vector<int32_t> ids;
  try {
    ids = t.encode(text);
    if (!valid) std::abort();  // invalid input must not be accepted
  } catch (const nanovllm::Error&) {
    if (valid) std::abort();  // valid input must not be rejected
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= t.vocab_size()) std::abort();
  }
  if (valid && t.decode(ids).size() < text.size() / 4) std::abort();  // NFC never shrinks text 4x
  // The raw bytes as ids: arbitrary (partial-character, special, out-of-range) id sequences.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 3 < size; i += 4) {
    int32_t v;
    __builtin_memcpy(&v, data + i, 4);
    raw.push_back(v % 151700);
  }
  for (bool skip : {false, true}) {
    const std::string whole = t.decode(raw, skip);
    if (nanovllm::tokenizer::find_invalid_utf8(whole)) std::abort();
    IncrementalDetokenizer d(t, skip);
    std::string streamed;
    for (int32_t id : raw) streamed += d.add(id);
    streamed += d.finish();
    if (streamed != whole) std::abort();
  }
  return 0;
}
