#include "eval/tasks.h"

#include <algorithm>

#include "nanovllm/core/error.h"

namespace nanovllm::eval {
namespace {

TaskConfig niah(std::string name, Haystack haystack, NeedleType key, NeedleType value, int keys, int values,
                int queries) {
  TaskConfig t;
  t.name = std::move(name);
  t.kind = TaskKind::kNiah;
  t.max_new_tokens = 128;
  t.haystack = haystack;
  t.key_type = key;
  t.value_type = value;
  t.num_keys = keys;
  t.num_values = values;
  t.num_queries = queries;
  return t;
}

std::vector<TaskConfig> make_tasks() {
  using H = Haystack;
  using N = NeedleType;
  std::vector<TaskConfig> tasks = {
      niah("niah_single_1", H::kNoise, N::kWords, N::kNumbers, 1, 1, 1),
      niah("niah_single_2", H::kEssay, N::kWords, N::kNumbers, 1, 1, 1),
      niah("niah_single_3", H::kEssay, N::kWords, N::kUuids, 1, 1, 1),
      niah("niah_multikey_1", H::kEssay, N::kWords, N::kNumbers, 4, 1, 1),
      niah("niah_multikey_2", H::kNeedle, N::kWords, N::kNumbers, 1, 1, 1),
      niah("niah_multikey_3", H::kNeedle, N::kUuids, N::kUuids, 1, 1, 1),
      niah("niah_multivalue", H::kEssay, N::kWords, N::kNumbers, 1, 4, 1),
      niah("niah_multiquery", H::kEssay, N::kWords, N::kNumbers, 4, 1, 4),
  };
  TaskConfig vt;
  vt.name = "vt";
  vt.kind = TaskKind::kVariableTracking;
  vt.max_new_tokens = 30;
  tasks.push_back(vt);
  TaskConfig cwe;
  cwe.name = "cwe";
  cwe.kind = TaskKind::kCommonWords;
  cwe.max_new_tokens = 120;
  tasks.push_back(cwe);
  TaskConfig fwe;
  fwe.name = "fwe";
  fwe.kind = TaskKind::kFreqWords;
  fwe.max_new_tokens = 50;
  tasks.push_back(fwe);
  return tasks;
}

}  // namespace

const std::vector<TaskConfig>& ruler_tasks() {
  static const std::vector<TaskConfig> tasks = make_tasks();
  return tasks;
}

const TaskConfig& find_task(std::string_view name) {
  for (const TaskConfig& t : ruler_tasks())
    if (t.name == name) return t;
  std::string known;
  for (const TaskConfig& t : ruler_tasks()) known += (known.empty() ? "" : ", ") + t.name;
  if (name == "qa_1" || name == "qa_2")
    NANOVLLM_FAIL("unknown task '", name, "': RULER's QA tasks need SQuAD / HotpotQA, which are not shipped; "
                  "known tasks: ", known);
  NANOVLLM_FAIL("unknown task '", name, "'; known tasks: ", known, " (or all, niah)");
}

std::vector<TaskConfig> parse_task_list(std::string_view list) {
  std::vector<TaskConfig> out;
  auto add = [&](const TaskConfig& t) {
    if (std::none_of(out.begin(), out.end(), [&](const TaskConfig& o) { return o.name == t.name; }))
      out.push_back(t);
  };
  size_t i = 0;
  while (i <= list.size()) {
    size_t j = list.find(',', i);
    if (j == std::string_view::npos) j = list.size();
    std::string_view name = list.substr(i, j - i);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    NANOVLLM_CHECK(!name.empty(), "--tasks: empty task name in '", list, "'");
    if (name == "all") {
      for (const TaskConfig& t : ruler_tasks()) add(t);
    } else if (name == "niah") {
      for (const TaskConfig& t : ruler_tasks())
        if (t.kind == TaskKind::kNiah) add(t);
    } else {
      add(find_task(name));
    }
    i = j + 1;
  }
  return out;
}

std::string_view to_string(Metric m) {
  return m == Metric::kStringMatchAll ? "string_match_all" : "string_match_part";
}

std::string_view to_string(NeedleType t) {
  switch (t) {
    case NeedleType::kWords: return "words";
    case NeedleType::kNumbers: return "numbers";
    case NeedleType::kUuids: return "uuids";
  }
  return "?";
}

}  // namespace nanovllm::eval
