// Word lists of the needle keys ("adjective-noun", like RULER's "words" needles). Immutable after the
// first call (function-local statics: no global mutable state).
#pragma once

#include <string_view>
#include <vector>

namespace nanovllm::eval {

const std::vector<std::string_view>& adjectives();
const std::vector<std::string_view>& nouns();

}  // namespace nanovllm::eval
