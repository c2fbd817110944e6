// Helpers shared by the eval tests: the test tokenizers, a sample builder over the built-in haystack, and
// the `nanovllm` binary.
#pragma once

#include <filesystem>
#include <string>

#include "eval/corpus.h"
#include "eval/sample.h"
#include "nanovllm/tokenizer/tokenizer.h"
#include "support/run_command.h"
#include "support/test_models.h"

namespace nanovllm::eval::testing {

inline std::filesystem::path retrieval_model_dir() { return nanovllm::testing::test_data_dir() / "retrieval-model"; }
// The same weights with YaRN (factor 8 over 16K) and max_position_embeddings 131072: the 128K ruler.
inline std::filesystem::path long_retrieval_model_dir() {
  return nanovllm::testing::test_data_dir() / "retrieval-model-128k";
}
inline std::filesystem::path qwen3_tokenizer_dir() { return nanovllm::testing::test_data_dir() / "qwen3-tokenizer"; }

// The fixture's byte-level tokenizer (one token per byte) and Qwen3's BPE, loaded once per process.
inline const Tokenizer& byte_tokenizer() {
  static const Tokenizer tok = Tokenizer::from_model_dir(retrieval_model_dir());
  return tok;
}
inline const Tokenizer& qwen3_tokenizer() {
  static const Tokenizer tok = Tokenizer::from_model_dir(qwen3_tokenizer_dir());
  return tok;
}

inline SampleBuilder builder(const Tokenizer& tok = byte_tokenizer(), uint64_t seed = 42) {
  return SampleBuilder(tok, none_format(), Corpus::builtin(), seed, 0, /*keep_text=*/true);
}

using nanovllm::testing::CommandResult;
using nanovllm::testing::run_cli;

}  // namespace nanovllm::eval::testing
