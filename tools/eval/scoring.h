// RULER's scoring (scripts/eval/synthetic/constants.py, evaluate.py), per sample:
//   string_match_all:  the fraction of references found in the prediction (case-insensitive substring);
//   string_match_part: 1 when any reference is found, else 0.
// RULER's task score is the mean over samples, times 100, rounded to 2 decimals. Case folding is ASCII
// (RULER's str.lower() also folds non-ASCII letters; every reference here is ASCII).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "eval/tasks.h"

namespace nanovllm::eval {

// RULER's postprocess_pred: strip, control characters (0x00-0x1f) to '\n', strip again.
std::string postprocess_prediction(std::string_view prediction);

double string_match_all(std::string_view prediction, const std::vector<std::string>& references);
double string_match_part(std::string_view prediction, const std::vector<std::string>& references);
// The task's metric on the postprocessed prediction, in [0, 1].
double score_prediction(Metric metric, std::string_view prediction, const std::vector<std::string>& references);

}  // namespace nanovllm::eval
