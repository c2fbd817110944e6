#include "nanovllm/server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace nanovllm::server {

StopMatcher::StopMatcher(std::vector<std::string> stop) : stop_(std::move(stop)) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::add(std::string_view piece) {
  if (stopped_) return "";
  pending_.append(piece);
  if (stop_.empty()) return std::exchange(pending_, {});
  // Everything before pending_ was proven not to overlap a stop string, so a match starts inside pending_.
  size_t first = std::string::npos;
  for (const std::string& s : stop_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix of pending_ that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stop_) {
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
      if (std::string_view(pending_).substr(pending_.size() - k) == std::string_view(s).substr(0, k)) {
        hold = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return "";
  return std::exchange(pending_, {});
}

}  // namespace nanovllm::server
