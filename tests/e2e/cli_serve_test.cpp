// `nanovllm serve` as a process: the model as a positional argument (`serve MODEL`, as vLLM takes it),
// and signals: the first SIGINT starts the graceful shutdown (in-flight requests get --shutdown-grace
// seconds), a second one ends the process at once with status 130.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "text_test_util.h"

namespace nanovllm {
namespace {

using Clock = std::chrono::steady_clock;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A `nanovllm serve` child process with stdout and stderr in files; killed if the test leaves it running.
class ServeProcess {
 public:
  explicit ServeProcess(const std::string& args) {
    out_ = testing::write_temp_file("serve.out", "");
    err_ = testing::write_temp_file("serve.err", "");
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string cmd = "exec " + testing::nanovllm_binary().string() + " " + args + " > " + out_.string() +
                              " 2> " + err_.string();
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  // The port from "serving ... on http://127.0.0.1:PORT"; -1 when it does not appear in `timeout`.
  int wait_for_port(std::chrono::seconds timeout) {
    const auto end = Clock::now() + timeout;
    const std::regex re(R"(on http://[^:]+:([0-9]+))");
    while (Clock::now() < end && !exited()) {
      std::smatch m;
      const std::string out = read_file(out_);
      if (std::regex_search(out, m, re)) return std::stoi(m[1]);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  // Whether stderr holds `text` within `timeout`.
  bool wait_for_stderr(const std::string& text, std::chrono::seconds timeout) {
    const auto end = Clock::now() + timeout;
    while (Clock::now() < end) {
      if (stderr_text().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // The exit status once the process ends within `timeout`; -1 if it does not (or died of a signal).
  int wait_exit(std::chrono::milliseconds timeout) {
    const auto end = Clock::now() + timeout;
    while (Clock::now() < end) {
      if (exited()) return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  void signal(int sig) const { ::kill(pid_, sig); }
  std::string stderr_text() const { return read_file(err_); }

 private:
  bool exited() {
    if (!exited_ && ::waitpid(pid_, &status_, WNOHANG) == pid_) exited_ = true;
    return exited_;
  }
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  std::filesystem::path out_, err_;
};

// Sends a streaming completion that runs for a long time; returns the socket once the first chunk came
// (the request is in flight), or -1.
int start_long_request(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  const std::string body = R"({"prompt": [1, 2, 3], "max_tokens": 20000, "ignore_eos": true, "stream": true})";
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return -1;
  }
  std::string got;
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  while (got.find("data: ") == std::string::npos && ::poll(&p, 1, 30000) == 1) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  if (got.find("data: ") == std::string::npos) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST(CliServe, ModelAsPositionalArgumentAndSecondSigintExitsAtOnce) {
  // `serve MODEL` (no --model); a grace long enough that waiting for it would fail the test.
  ServeProcess serve("serve " + testing::text_model_dir().string() + " --backend cpu --port 0 --shutdown-grace 120");
  const int port = serve.wait_for_port(std::chrono::seconds(60));
  ASSERT_GT(port, 0) << serve.stderr_text();
  const int client = start_long_request(port);
  ASSERT_GE(client, 0) << "no streamed chunk; " << serve.stderr_text();

  serve.signal(SIGINT);
  ASSERT_TRUE(serve.wait_for_stderr("shutting down", std::chrono::seconds(10))) << serve.stderr_text();
  EXPECT_EQ(serve.wait_exit(std::chrono::milliseconds(300)), -1) << "the first SIGINT waits for the request";
  const auto t0 = Clock::now();
  serve.signal(SIGINT);
  EXPECT_EQ(serve.wait_exit(std::chrono::milliseconds(5000)), 130) << serve.stderr_text();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  EXPECT_NE(serve.stderr_text().find("exiting now"), std::string::npos) << serve.stderr_text();
  ::close(client);
}

TEST(CliServe, ModelIsRequiredEitherWay) {
  const auto r = testing::run_nanovllm("serve --port 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--model is required"), std::string::npos) << r.err;
}

// Issue 45 (item 7): `--api-key ""` (an unset variable: --api-key "$KEY") is an error, not a server without
// auth. Checked before the model is looked at.
TEST(CliServe, EmptyApiKeyIsAnError) {
  const auto r = testing::run_nanovllm("serve /nonexistent/model --port 0 --api-key ''");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--api-key is empty"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace nanovllm
