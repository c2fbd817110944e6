// The task registry: RULER's 11 synthetic tasks with their settings, and clear errors for unknown names.
#include <gtest/gtest.h>

#include "eval/tasks.h"
#include "support/expect_error.h"

namespace nanovllm::eval {
namespace {

namespace testing = nanovllm::testing;

TEST(EvalTasks, RulerSyntheticTasksWithTheirSettings) {
  std::vector<std::string> names;
  for (const TaskConfig& t : ruler_tasks()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"niah_single_1", "niah_single_2", "niah_single_3", "niah_multikey_1",
                                             "niah_multikey_2", "niah_multikey_3", "niah_multivalue",
                                             "niah_multiquery", "vt", "cwe", "fwe"}));
  EXPECT_EQ(find_task("niah_single_1").haystack, Haystack::kNoise);
  EXPECT_EQ(find_task("niah_single_3").value_type, NeedleType::kUuids);
  EXPECT_EQ(find_task("niah_multikey_3").key_type, NeedleType::kUuids);
  EXPECT_EQ(find_task("niah_multikey_2").haystack, Haystack::kNeedle);
  EXPECT_EQ(find_task("niah_multivalue").num_values, 4);
  EXPECT_EQ(find_task("niah_multiquery").num_queries, 4);
  EXPECT_EQ(find_task("niah_single_2").max_new_tokens, 128);
  EXPECT_EQ(find_task("vt").max_new_tokens, 30);
  EXPECT_EQ(find_task("cwe").max_new_tokens, 120);
  EXPECT_EQ(find_task("fwe").max_new_tokens, 50);
  for (const TaskConfig& t : ruler_tasks()) EXPECT_EQ(t.metric, Metric::kStringMatchAll) << t.name;
}

TEST(EvalTasks, ParsesListsAllAndNiah) {
  EXPECT_EQ(parse_task_list("all").size(), 11u);
  EXPECT_EQ(parse_task_list("niah").size(), 8u);
  const auto some = parse_task_list("vt, niah_single_1,vt");
  ASSERT_EQ(some.size(), 2u);
  EXPECT_EQ(some[0].name, "vt");
  EXPECT_EQ(some[1].name, "niah_single_1");
}

TEST(EvalTasks, UnknownNamesAreClearErrors) {
  testing::expect_error([] { parse_task_list("niah_single_9"); }, {"unknown task 'niah_single_9'"});
  testing::expect_error([] { parse_task_list("niah_single_9"); }, {"niah_multiquery"});  // lists the known ones
  testing::expect_error([] { parse_task_list("qa_1"); }, {"SQuAD"});
  testing::expect_error([] { parse_task_list("vt,,cwe"); }, {"empty task name"});
  testing::expect_error([] { parse_task_list(""); }, {"empty task name"});
}

}  // namespace
}  // namespace nanovllm::eval
