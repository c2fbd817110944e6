// StopMatcher: applies OpenAI `stop` strings to streamed text. Text that might be the start of a stop string
// is held back until the next pieces show whether it is one; a stop string itself is never returned.
//   StopMatcher m({"###"});
//   m.add("ab#") -> "ab"   (the "#" may start "###")
//   m.add("#x")  -> "##x"  (it did not)
//   m.add("###") -> "" and m.stopped() -> true; everything after the stop string is dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stop = {});

  // Appends `piece` (whole UTF-8 characters) and returns the text now safe to emit. After a stop string
  // was found, returns the text before it (once) and then only "".
  std::string add(std::string_view piece);
  // End of generation: the held-back text (no stop string can complete any more); "" after a stop.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_;
  std::string pending_;  // text not yet returned: a suffix that is a proper prefix of some stop string
  bool stopped_ = false;
};

}  // namespace nanovllm::server
