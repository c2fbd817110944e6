// Single-thread encode throughput, for `nanovllm bench tokenizer`-style tooling.
#pragma once

#include <cstdint>
#include <string>

#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm::tokenizer {

struct TokenizerBenchResult {
  int64_t bytes = 0;         // corpus size
  int64_t tokens = 0;        // ids produced by one pass
  int64_t chunks = 0;        // encode() calls per pass
  int passes = 0;            // timed passes
  double seconds = 0;        // best pass, wall clock
  double mb_per_s = 0;       // bytes / 1e6 / seconds
  double tokens_per_s = 0;
  double cold_mb_per_s = 0;  // the warm-up pass, word cache initially empty
};

// Encodes `corpus` in ~chunk_bytes pieces cut at line ends (like a stream of prompts), one warm-up pass
// (fills the word cache, as a long-running server would) then `passes` timed passes; reports the best.
// Throws nanovllm::Error when the corpus is not valid UTF-8.
TokenizerBenchResult bench_tokenizer(const Tokenizer& tokenizer, const std::string& corpus, int passes = 3,
                                     size_t chunk_bytes = 4096);

}  // namespace nanovllm::tokenizer
