// The RULER synthetic tasks (RULER's scripts/synthetic.yaml): what each generates and how it is scored.
// The two QA tasks (qa_1 SQuAD, qa_2 HotpotQA) need data sets that cannot be shipped or downloaded here,
// so they are not in the list.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nanovllm::eval {

enum class TaskKind { kNiah, kVariableTracking, kCommonWords, kFreqWords };
enum class Haystack { kNoise, kEssay, kNeedle };      // niah: what fills the context between needles
enum class NeedleType { kWords, kNumbers, kUuids };   // niah keys and values
enum class Metric { kStringMatchAll, kStringMatchPart };

struct TaskConfig {
  std::string name;
  TaskKind kind = TaskKind::kNiah;
  Metric metric = Metric::kStringMatchAll;
  int64_t max_new_tokens = 128;  // RULER's tokens_to_generate; also reserved out of the context length
  // niah
  Haystack haystack = Haystack::kEssay;
  NeedleType key_type = NeedleType::kWords;
  NeedleType value_type = NeedleType::kNumbers;
  int num_keys = 1, num_values = 1, num_queries = 1;
  // variable tracking
  int num_chains = 1, num_hops = 4;
  // common words extraction: each of num_common words freq_common times, the others freq_uncommon times
  int num_common = 10, freq_common = 30, freq_uncommon = 3;
  // frequent words extraction: Zipf exponent (only 2 is implemented: counts stay exact integer math)
  int alpha = 2;
};

// All tasks in RULER's order: niah_single_1..3, niah_multikey_1..3, niah_multivalue, niah_multiquery,
// vt, cwe, fwe.
const std::vector<TaskConfig>& ruler_tasks();
// The task named `name`; nanovllm::Error listing the known names otherwise.
const TaskConfig& find_task(std::string_view name);
// "all", or a comma-separated list of names ("niah" selects every niah_* task); duplicates kept once.
std::vector<TaskConfig> parse_task_list(std::string_view list);

std::string_view to_string(Metric m);
std::string_view to_string(NeedleType t);  // RULER's type names: "words", "numbers", "uuids"

}  // namespace nanovllm::eval
