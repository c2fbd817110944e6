// scripts/demo.sh, what ./setup.sh runs after building: readable generated text from a model it says is a
// random-weight test model (not raw JSON with logprobs), then the next commands to try.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <sstream>
#include <string>

#include "support/process_scratch_dir.h"
#include "text_test_util.h"

namespace nanovllm {
namespace {

TEST(Demo, ReadableTextFromARandomWeightModelThenNextCommands) {
  const testing::ProcessScratchDir work("nanovllm-demo");
  const std::string root = std::string(NANOVLLM_TEST_DATA) + "/../..";
  const std::string cmd = "bash " + root + "/scripts/demo.sh --bin " + testing::nanovllm_binary().string() +
                          " --workdir " + work.path().string() + " --backend cpu 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  for (const char* part : {"RANDOM-WEIGHT", "gibberish", "prompt tokens -> 24 tokens (length):", "Next, try",
                           "generate --model ~/models/Qwen3-0.6B", " chat --model ", " serve ", "--help"}) {
    EXPECT_NE(out.find(part), std::string::npos) << "'" << part << "' not in:\n" << out;
  }
  // Text, not JSON: no line is a JSON object and no logprobs are printed.
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) EXPECT_NE(line.rfind("{", 0), 0u) << line;
  EXPECT_EQ(out.find("logprob"), std::string::npos) << out;
}

}  // namespace
}  // namespace nanovllm
