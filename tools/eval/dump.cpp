#include "eval/dump.h"

#include <charconv>

#include <nlohmann/json.hpp>

namespace nanovllm::eval {
namespace {

// A JSON list of ids, written directly: prompts reach 100K+ ids and the trainer dumps millions.
void append_ids(std::string& out, const std::vector<int32_t>& ids) {
  out.push_back('[');
  char buf[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out.push_back(',');
    const auto r = std::to_chars(buf, buf + sizeof buf, ids[i]);
    out.append(buf, r.ptr);
  }
  out.push_back(']');
}

}  // namespace

void write_sample_jsonl(std::ostream& out, const Sample& s, const tokenizer::Tokenizer& tokenizer) {
  nlohmann::ordered_json j;
  j["task"] = s.task;
  j["context"] = s.context;
  j["index"] = s.index;
  j["seed"] = s.seed;
  j["metric"] = std::string(to_string(s.metric));
  j["max_new_tokens"] = s.max_new_tokens;
  j["depth"] = s.depth;
  j["haystack_units"] = s.haystack_units;
  j["answers"] = s.answers;
  j["target"] = s.target;
  j["target_ids"] = tokenizer.encode(s.target, /*add_special_tokens=*/false);
  j["prompt_tokens"] = s.prompt_ids.size();
  std::string line = j.dump();
  line.pop_back();  // '}': the two large fields follow
  line += ",\"prompt\":";
  line += nlohmann::json(s.prompt).dump();
  line += ",\"prompt_ids\":";
  append_ids(line, s.prompt_ids);
  line += "}\n";
  out.write(line.data(), static_cast<std::streamsize>(line.size()));
}

}  // namespace nanovllm::eval
