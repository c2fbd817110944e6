// Nesting depth of JSON text, measured before it is parsed. nlohmann::json parses iteratively, but
// copying, comparing or dumping a parsed value recurses once per level: 40,000 levels overflow the stack.
// Request bodies are therefore refused (400) past kMaxJsonDepth levels before anything walks them.
#pragma once

#include <string_view>

namespace nanovllm::server {

constexpr int kMaxJsonDepth = 64;  // far more than any OpenAI request needs (tool schemas nest ~10 deep)

// The deepest nesting of arrays and objects in `text` (strings skipped, escapes honoured), counting stops
// at `limit` + 1. Exact for valid JSON; invalid JSON fails to parse anyway.
int json_depth(std::string_view text, int limit = kMaxJsonDepth);

}  // namespace nanovllm::server
