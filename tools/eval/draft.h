// A task generator's output for one sample before its length is fitted: every random choice is made
// (needles, keys, values, positions as fractions of the haystack), and `render` builds the user turn for
// any number of haystack units. The fitter (fit.h) then picks the largest number that fits the context.
// Depending only on (sample seed, units), render is deterministic and may be called many times.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "eval/corpus.h"
#include "eval/rng.h"
#include "eval/tasks.h"

namespace nanovllm::eval {

struct Draft {
  // The user turn (task template filled in) with `units` haystack units: noise sentences, corpus words,
  // distractor needles, list words or coded words, depending on the task.
  std::function<std::string(int64_t units)> render;
  std::string answer_prefix;         // RULER's answer prefix, after the model's turn header
  std::vector<std::string> answers;  // the references the metric looks for
  std::string target;                // a reference completion of the answer prefix (for training)
  int64_t min_units = 1;
  int64_t max_units = std::numeric_limits<int32_t>::max();
  double depth = -1;  // niah: where the first answer's needle sits in the haystack, in [0, 1]
};

struct DraftInputs {
  const Corpus& corpus;
  int64_t context = 0;                 // the target length (some tasks scale with it, as in RULER)
  std::optional<double> depth;         // niah: put every needle here (fraction) instead of drawing depths
  // RULER's short-context variant (vt: a shorter example, cwe: the settings RULER uses below 4K tokens),
  // which the builder falls back to when the regular prompt cannot fit the context at all.
  bool compact = false;
};

Draft make_niah(const TaskConfig& task, Rng& rng, const DraftInputs& in);
Draft make_variable_tracking(const TaskConfig& task, Rng& rng, const DraftInputs& in);
Draft make_common_words(const TaskConfig& task, Rng& rng, const DraftInputs& in);
Draft make_freq_words(const TaskConfig& task, Rng& rng, const DraftInputs& in);
Draft make_draft(const TaskConfig& task, Rng& rng, const DraftInputs& in);

}  // namespace nanovllm::eval
