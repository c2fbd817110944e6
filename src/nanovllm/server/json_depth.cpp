#include "nanovllm/server/json_depth.h"

#include <limits>
#include <vector>

namespace nanovllm::server {

JsonShape json_shape(std::string_view text, int depth_limit, int64_t key_limit) {
  JsonShape shape;
  // Per open level: the keys of an object so far, or -1 for an array. An object has one ':' per key
  // (outside strings), so counting them counts its keys.
  std::vector<int64_t> open;
  open.reserve(static_cast<size_t>(depth_limit) + 1);
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    switch (c) {
      case '"': in_string = true; break;
      case '[':
      case '{':
        open.push_back(c == '{' ? 0 : -1);
        if (static_cast<int>(open.size()) > shape.depth) shape.depth = static_cast<int>(open.size());
        if (shape.depth > depth_limit) return shape;
        break;
      case ']':
      case '}':
        if (!open.empty()) open.pop_back();
        break;
      case ':':
        if (!open.empty() && open.back() >= 0) {
          const int64_t keys = ++open.back();
          if (keys > shape.widest) shape.widest = keys;
          if (shape.widest > key_limit) return shape;
        }
        break;
      default: break;
    }
  }
  return shape;
}

int json_depth(std::string_view text, int limit) {
  return json_shape(text, limit, std::numeric_limits<int64_t>::max()).depth;
}

}  // namespace nanovllm::server
