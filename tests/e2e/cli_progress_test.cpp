// `nanovllm generate` on long generations: a warning when --max-tokens is more than the model length
// leaves, and a progress line on stderr when (and only when) stderr is a terminal. The terminal is a
// pseudo-terminal the test opens, so this runs anywhere (CI included).
#include <gtest/gtest.h>

#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "support/test_models.h"
#include "text_test_util.h"

namespace nanovllm {
namespace {

using testing::run_nanovllm;

std::string tiny_model() { return testing::tiny_model_dir("cli-progress", nlohmann::json::object(), 3).string(); }

// Runs `nanovllm <args>` through /bin/sh with stdout to /dev/null and stderr on a pseudo-terminal;
// returns what the terminal got and the exit status.
std::pair<int, std::string> run_on_terminal(const std::string& args) {
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) return {-1, "forkpty failed"};
  if (pid == 0) {
    const std::string cmd = testing::nanovllm_binary().string() + " " + args + " > /dev/null";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(master, buf, sizeof(buf));
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;  // EIO: the child side closed
    }
  }
  ::close(master);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(CliProgress, CappedMaxTokensWarns) {
  // The tiny model's length is 40960; --max-model-len 64 leaves 61 tokens after a 3-token prompt.
  const auto r = run_nanovllm("generate --backend cpu --model " + tiny_model() +
                              " --prompt-ids 1,2,3 --temperature 0 --ignore-eos --max-tokens 100000 --max-model-len 64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: --max-tokens 100000 is capped at 61"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--max-model-len"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("61 tokens (length)"), std::string::npos) << r.out;
  // Within the limit: no warning.
  const auto ok = run_nanovllm("generate --backend cpu --model " + tiny_model() +
                               " --prompt-ids 1,2,3 --temperature 0 --max-tokens 8 --max-model-len 64");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.err.find("warning"), std::string::npos) << ok.err;
}

TEST(CliProgress, ProgressLineOnlyOnATerminal) {
  // The line "generating: N/600 tokens" is drawn from the first token on, rewritten in place, and erased
  // at the end (600 tokens: a second or more here, so it is rewritten with a rate too).
  const std::string args = "generate --backend cpu --model " + tiny_model() +
                           " --prompt-ids 1,2 --temperature 0 --ignore-eos --max-tokens 600";
  const auto [code, term] = run_on_terminal(args);
  ASSERT_EQ(code, 0) << term;
  EXPECT_NE(term.find("\r\033[Kgenerating: "), std::string::npos) << term;
  EXPECT_NE(term.find("/600 tokens"), std::string::npos) << term;
  const size_t summary = term.rfind("generated 600 tokens");
  ASSERT_NE(summary, std::string::npos) << term;
  ASSERT_GE(summary, 4u);
  EXPECT_EQ(term.substr(summary - 4, 4), "\r\033[K") << "the line is erased before the summary: " << term;
  // Not a terminal: no progress line in the captured stderr.
  const auto piped = run_nanovllm(args);
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.err.find("generating: "), std::string::npos) << piped.err;
  EXPECT_NE(piped.err.find("generated 600 tokens"), std::string::npos) << piped.err;
}

}  // namespace
}  // namespace nanovllm
