// The shape of JSON text, measured before it is parsed: nesting depth and the widest object.
// - Depth: nlohmann::json parses iteratively, but copying, comparing or dumping a parsed value recurses once
//   per level: 40,000 levels overflow the stack.
// - Width: request bodies parse as nlohmann::ordered_json (the chat template sees keys in the client's order),
//   whose objects find a key by a linear scan, so an object of k keys costs O(k^2) to build: 200,000 keys
//   take 40 s of a core. Bounding the keys of each object keeps the parse linear in the body.
// Request bodies past either limit are refused (400) before anything parses or walks them.
#pragma once

#include <cstdint>
#include <string_view>

namespace nanovllm::server {

constexpr int kMaxJsonDepth = 64;  // far more than any OpenAI request needs (tool schemas nest ~10 deep)
// Keys in one object: above logit_bias' 300 entries (OpenAI's limit) and any tool schema's properties.
// At this width an 8 MiB body parses within ~2x the time of the same bytes in small objects.
constexpr int64_t kMaxJsonObjectKeys = 512;

struct JsonShape {
  int depth = 0;        // the deepest nesting of arrays and objects
  int64_t widest = 0;   // the most keys in one object
};

// One pass over `text` (strings skipped, escapes honoured); it stops as soon as the depth passes
// `depth_limit` or an object passes `key_limit` keys, so a result above a limit is that limit + 1.
// Exact for valid JSON; invalid JSON fails to parse anyway.
JsonShape json_shape(std::string_view text, int depth_limit = kMaxJsonDepth, int64_t key_limit = kMaxJsonObjectKeys);

// The depth alone (no key limit).
int json_depth(std::string_view text, int limit = kMaxJsonDepth);

}  // namespace nanovllm::server
