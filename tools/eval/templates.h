// RULER's prompt templates (NVIDIA/RULER scripts/data/synthetic/constants.py, Apache-2.0), reproduced
// from the RULER sources as we know them: the task template goes in the user turn, the answer prefix
// after the model's turn header (RULER appends it to the model template). README.md ("nanovllm eval")
// lists where the wording may differ from upstream.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace nanovllm::eval::templates {

extern const std::string_view kNiah;
extern const std::string_view kNiahAnswerPrefix;
extern const std::string_view kNiahNeedle;  // "One of the special magic {type_needle_v} for {key} is: {value}."
extern const std::string_view kVariableTracking;
extern const std::string_view kVariableTrackingAnswerPrefix;
extern const std::string_view kCommonWords;
extern const std::string_view kCommonWordsAnswerPrefix;
extern const std::string_view kFreqWords;
extern const std::string_view kFreqWordsAnswerPrefix;
// RULER's noise haystack sentence (niah "noise" haystack, variable tracking filler).
extern const std::string_view kNoise;

// Python's str.format for named fields only ("{name}"): each field must be in `fields`, else
// nanovllm::Error. Substituted values are not scanned again.
std::string format(std::string_view tmpl, std::initializer_list<std::pair<std::string_view, std::string_view>> fields);

// Python's str.replace: every non-overlapping occurrence, left to right.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

}  // namespace nanovllm::eval::templates
