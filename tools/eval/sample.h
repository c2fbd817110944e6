// One evaluation prompt and how to score it; SampleBuilder makes it from (task, context length, index,
// seed) with the model's tokenizer: the same sample on every machine and thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "eval/corpus.h"
#include "eval/prompt_format.h"
#include "eval/tasks.h"
#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm::eval {

struct Sample {
  std::string task;
  int64_t context = 0;  // the requested length: prompt + max_new_tokens <= context
  int64_t index = 0;
  uint64_t seed = 0;    // the run's seed (the sample's own stream derives from it, see rng.h)
  Metric metric = Metric::kStringMatchAll;
  int64_t max_new_tokens = 0;
  std::string prompt;  // chat-wrapped text with the answer prefix (empty unless kept)
  std::vector<int32_t> prompt_ids;
  std::vector<std::string> answers;
  std::string target;      // reference completion (training)
  double depth = -1;       // niah: relative position of the answer's needle
  int64_t haystack_units = 0;
};

struct SampleRequest {
  const TaskConfig* task = nullptr;
  int64_t context = 0;
  int64_t index = 0;
  std::optional<double> depth;  // needle sweep: fixed needle depth (part of the sample's seed)
};

class SampleBuilder {
 public:
  // `max_new_tokens` > 0 replaces RULER's per-task value (also in what is reserved out of the context).
  // The tokenizer and corpus must outlive the builder. Thread-safe: build() may run concurrently.
  SampleBuilder(const tokenizer::Tokenizer& tokenizer, PromptFormat format, const Corpus& corpus, uint64_t seed,
                int64_t max_new_tokens = 0, bool keep_text = false);

  // nanovllm::Error when the context cannot hold even the task's smallest prompt.
  Sample build(const SampleRequest& request) const;
  // The sample, or nullopt (`why` says why) when the context cannot hold its smallest prompt: each sample
  // draws its own needles and keys, so one may fit where another does not.
  std::optional<Sample> try_build(const SampleRequest& request, std::string* why = nullptr) const;

  const PromptFormat& format() const { return format_; }
  uint64_t seed() const { return seed_; }

 private:
  const tokenizer::Tokenizer& tokenizer_;
  PromptFormat format_;
  const Corpus& corpus_;
  uint64_t seed_;
  int64_t max_new_tokens_;
  bool keep_text_;
};

}  // namespace nanovllm::eval
