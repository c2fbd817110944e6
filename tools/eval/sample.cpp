#include "eval/sample.h"

#include <cstdio>

#include "eval/draft.h"
#include "eval/fit.h"
#include "eval/rng.h"
#include "nanovllm/core/error.h"

namespace nanovllm::eval {

Draft make_draft(const TaskConfig& task, Rng& rng, const DraftInputs& in) {
  switch (task.kind) {
    case TaskKind::kNiah: return make_niah(task, rng, in);
    case TaskKind::kVariableTracking: return make_variable_tracking(task, rng, in);
    case TaskKind::kCommonWords: return make_common_words(task, rng, in);
    case TaskKind::kFreqWords: return make_freq_words(task, rng, in);
  }
  NANOVLLM_FAIL("unknown task kind");
}

SampleBuilder::SampleBuilder(const tokenizer::Tokenizer& tokenizer, PromptFormat format, const Corpus& corpus,
                             uint64_t seed, int64_t max_new_tokens, bool keep_text)
    : tokenizer_(tokenizer),
      format_(std::move(format)),
      corpus_(corpus),
      seed_(seed),
      max_new_tokens_(max_new_tokens),
      keep_text_(keep_text) {}

Sample SampleBuilder::build(const SampleRequest& req) const {
  std::string why;
  std::optional<Sample> s = try_build(req, &why);
  NANOVLLM_CHECK(s.has_value(), why);
  return std::move(*s);
}

std::optional<Sample> SampleBuilder::try_build(const SampleRequest& req, std::string* why) const {
  NANOVLLM_CHECK(req.task != nullptr, "SampleBuilder::build: no task");
  const TaskConfig& task = *req.task;
  Sample s;
  s.task = task.name;
  s.context = req.context;
  s.index = req.index;
  s.seed = seed_;
  s.metric = task.metric;
  s.max_new_tokens = max_new_tokens_ > 0 ? max_new_tokens_ : task.max_new_tokens;

  // The needle sweep's depth is part of the stream's name, so each cell draws its own needles.
  std::string stream = task.name;
  if (req.depth) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "@%.6f", *req.depth);
    stream += buf;
  }
  const int64_t budget = req.context - s.max_new_tokens;
  if (budget <= 0) {
    if (why) *why = detail::concat("task ", task.name, ": context ", req.context, " leaves no room for its ",
                                   s.max_new_tokens, " new tokens");
    return std::nullopt;
  }
  // The regular prompt, else (vt, cwe) RULER's compact variant; each try starts the sample's stream anew.
  const uint64_t key = sample_seed(seed_, stream, req.context, req.index);
  Draft d;
  FitResult fit;
  for (const bool compact : {false, true}) {
    if (compact && task.kind != TaskKind::kVariableTracking && task.kind != TaskKind::kCommonWords) break;
    Rng rng(key);
    d = make_draft(task, rng, DraftInputs{corpus_, req.context, req.depth, compact});
    fit = fit_to_budget([&](int64_t units) { return format_.wrap(d.render(units), d.answer_prefix); },
                        [&](const std::string& text) { return tokenizer_.encode(text, format_.add_special_tokens); },
                        d.min_units, d.max_units, budget);
    if (fit.fits) break;
  }
  if (!fit.fits) {
    if (why) *why = detail::concat("task ", task.name, ": context ", req.context, " is too short: its shortest prompt has ",
                                   fit.min_tokens, " tokens, plus ", s.max_new_tokens, " to generate");
    return std::nullopt;
  }
  s.prompt_ids = std::move(fit.ids);
  if (keep_text_) s.prompt = std::move(fit.text);
  s.answers = d.answers;
  s.target = d.target;
  s.depth = d.depth;
  s.haystack_units = fit.units;
  return s;
}

}  // namespace nanovllm::eval
