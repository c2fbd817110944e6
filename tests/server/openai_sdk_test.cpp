// The official OpenAI Node SDK (tests/openai_sdk, openai pinned in its package-lock.json) against the server:
// models.list / models.retrieve, chat and completions (whole and streamed), a tools request and the tool-call
// round trip, refusals of unsupported parameters and OpenAI-shaped errors, chat.completions.parse with a zod
// schema, streamed tool calls and reasoning_content. The SDK's own parsing checks every response shape.
// Then every schema of the JSON-Schema-Test-Suite as a constraint, answers validated with ajv
// (tests/openai_sdk/schema_suite.mjs). Needs node and `npm ci` in tests/openai_sdk: without them the test fails under CI
// (CI=true; .ci/run installs both) and is skipped with a message elsewhere.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "server/server_test_util.h"

namespace nanovllm::testing {
namespace {

constexpr const char* kKey = "sk-sdk-test";

std::filesystem::path sdk_dir() { return std::filesystem::path(NANOVLLM_TEST_DATA).parent_path() / "openai_sdk"; }

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a script of tests/openai_sdk against a fresh server (--reasoning-parser qwen3, room for the tools'
// instructions in the prompt).
void run_sdk(const std::string& script) {
  const bool ci = std::getenv("CI") && std::string(std::getenv("CI")) == "true";
  const bool have_node = std::system("node --version >/dev/null 2>&1") == 0;
  const bool have_sdk = std::filesystem::exists(sdk_dir() / "node_modules" / "openai" / "package.json");
  if (!have_node || !have_sdk) {
    const std::string why = !have_node ? "node is not installed (scripts/install_deps.sh --node)"
                                       : "the SDK is not installed: (cd tests/openai_sdk && npm ci)";
    if (ci) FAIL() << why;  // CI installs both: a skip there would hide a broken setup
    GTEST_SKIP() << why;
  }
  server::ServerConfig cfg;
  cfg.api_key = kKey;
  cfg.reasoning_parser = "qwen3";
  EngineConfig ec = server_engine_config();
  ec.model.max_model_len = 1024;
  TestServer ts(cfg, ec);
  const std::string path = server_model_dir().string();
  const std::string id = server_model_dir().filename().string();
  const std::string cmd = "node " + shell_quote((sdk_dir() / script).string()) + " " +
                          shell_quote("http://127.0.0.1:" + std::to_string(ts.port) + "/v1") + " " + kKey + " " +
                          shell_quote(id) + " " + shell_quote(path) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string output;
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), p)) output += buf;
  const int status = ::pclose(p);
  std::printf("%s", output.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_NE(output.find("all checks passed"), std::string::npos) << output;
  EXPECT_EQ(http_get(ts.port, "/health").status, 200);
}

TEST(OpenAiSdk, RoundTrips) { run_sdk("sdk_roundtrip.mjs"); }
TEST(OpenAiSdk, JsonSchemaTestSuiteAnswersValidateWithAjv) { run_sdk("schema_suite.mjs"); }

}  // namespace
}  // namespace nanovllm::testing
