// `nanovllm worker` and a node-0 command as separate processes over loopback (docs/tensor_parallel.md,
// section 7), as on two hosts: the tokens of one process, and a node that dies mid-run fails the other
// with its reason instead of hanging it.
#include <gtest/gtest.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "nanovllm/parallel/tcp.h"
#include "support/run_command.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

using testing::run_command;

// bash for the job control (`&`, `$!`, `wait`); the script must not contain single quotes.
testing::CommandResult run_shell(const std::string& script) { return run_command("bash -c '" + script + "'"); }

std::vector<std::vector<int32_t>> json_token_ids(const std::string& output) {
  std::vector<std::vector<int32_t>> ids;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] == '{') ids.push_back(nlohmann::json::parse(line)["token_ids"]);
  return ids;
}

std::string bin() { return testing::nanovllm_binary().string(); }

std::string model() {
  return testing::tiny_model_dir("tp-qwen3", {{"num_hidden_layers", 2}}, 41).string();
}

std::string group_options(int64_t node_rank, uint16_t port) {
  return " --backend cpu --model " + model() + " --tensor-parallel-size 2 --nnodes 2 --node-rank " +
         std::to_string(node_rank) + " --dist-init-addr 127.0.0.1:" + std::to_string(port);
}

TEST(CliMultiNode, TwoProcessesGiveOneProcesssTokens) {
  const std::string prompts = " --prompt-ids 1,2,3,4,5 --prompt-ids 70,8,9 --prompt-ids 400";
  const std::string sampling = " --temperature 0 --max-tokens 12 --ignore-eos --json";
  const testing::CommandResult one = run_shell(bin() + " generate --backend cpu --model " + model() + prompts + sampling);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const uint16_t port = Listener("127.0.0.1", 0).port();
  // The worker first: it waits for node 0 (either order works).
  const testing::CommandResult two = run_shell(bin() + " worker" + group_options(1, port) + " > /dev/null & W=$!; " + bin() +
                                    " generate" + group_options(0, port) + prompts + sampling +
                                    "; rc=$?; wait $W; echo worker exit $?; exit $rc");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_NE(two.output.find("worker exit 0"), std::string::npos) << two.output;
  const auto want = json_token_ids(one.output);
  ASSERT_EQ(want.size(), 3u);
  EXPECT_EQ(json_token_ids(two.output), want) << two.output;
}

// Shell lines that wait (up to 60 s) until the worker whose stderr goes to $L has joined the group (it says so at
// NANOVLLM_LOG_LEVEL=info): a node killed before the group forms leaves the other waiting for the rendezvous
// instead of failing mid-run (a fixed `sleep 2` lost that race on a busy machine).
constexpr const char* kUntilJoined = "for i in $(seq 300); do grep -q joined $L && break; sleep 0.2; done; ";

TEST(CliMultiNode, ANodeThatDiesFailsTheOtherWithTheReason) {
  const uint16_t port = Listener("127.0.0.1", 0).port();
  // Node 0 generates for long enough; the worker is killed mid-run: node 0 exits 1 naming the lost node.
  const testing::CommandResult r = run_shell(
      "L=$(mktemp); NANOVLLM_LOG_LEVEL=info " + bin() + " worker" + group_options(1, port) + " 2> $L & W=$!; (" +
      kUntilJoined + "kill -9 $W) & timeout 120 " + bin() + " generate" + group_options(0, port) +
      " --prompt-ids 1,2,3 --temperature 0 --max-tokens 40000 --max-model-len 40960 --ignore-eos; echo node0 exit $?; "
      "rm -f $L");
  EXPECT_NE(r.output.find("node0 exit 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("node 1"), std::string::npos) << r.output;
  // Node 0 killed: the worker exits 1, saying it lost node 0.
  const uint16_t port2 = Listener("127.0.0.1", 0).port();
  const testing::CommandResult w = run_shell(
      "L=$(mktemp); " + bin() + " generate" + group_options(0, port2) +
      " --prompt-ids 1,2,3 --temperature 0 --max-tokens 40000 --max-model-len 40960 --ignore-eos > /dev/null 2>&1"
      " & G=$!; NANOVLLM_LOG_LEVEL=info timeout 120 " + bin() + " worker" + group_options(1, port2) +
      " 2> $L & W=$!; " + kUntilJoined + "kill -9 $G; wait $W; echo worker exit $?; cat $L; rm -f $L");
  EXPECT_NE(w.output.find("worker exit 1"), std::string::npos) << w.output;
  EXPECT_NE(w.output.find("node 1 lost node 0 (127.0.0.1:" + std::to_string(port2) + ")"), std::string::npos)
      << w.output;
}

}  // namespace
}  // namespace nanovllm
