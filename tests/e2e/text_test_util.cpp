#include "text_test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>

#include "nanovllm/core/error.h"
#include "support/process_scratch_dir.h"

namespace nanovllm::testing {
namespace {


const std::filesystem::path& scratch() {
  static const ProcessScratchDir s("nanovllm-text-io");
  return s.path();
}

std::string read_all(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

std::filesystem::path qwen3_tokenizer_dir() { return std::filesystem::path(NANOVLLM_TEST_DATA) / "qwen3-tokenizer"; }

std::filesystem::path write_temp_file(const std::string& name, const std::string& content) {
  static std::atomic<int> counter{0};
  const auto p = scratch() / (std::to_string(counter++) + "-" + name);
  std::ofstream(p, std::ios::binary) << content;
  return p;
}


CliResult run_nanovllm(const std::string& args, const std::string& stdin_text) {
  return run_nanovllm_env("", args, stdin_text);
}

CliResult run_nanovllm_env(const std::string& env, const std::string& args, const std::string& stdin_text) {
  const auto in = write_temp_file("stdin.txt", stdin_text);
  const auto err = write_temp_file("stderr.txt", "");
  const std::string cmd =
      (env.empty() ? "" : env + " ") + nanovllm_binary().string() + " " + args + " < " + in.string() + " 2> " + err.string();
  CliResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  while (size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) r.out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = read_all(err);
  return r;
}

std::filesystem::path text_model_dir() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  // Shared by the test processes ctest runs in parallel: built in a private directory, then renamed into
  // place (atomic), so a directory that exists is complete.
  const auto dir = std::filesystem::path(NANOVLLM_BINARY_DIR) / "test-data" / "qwen3-tiny-with-tokenizer";
  if (std::filesystem::exists(dir / "tokenizer.json")) return dir;
  // Same filesystem as `dir` (rename cannot cross filesystems; /tmp may be a tmpfs).
  const auto tmp = dir.parent_path() / ("tmp-" + std::to_string(::getpid()) + "-" + dir.filename().string());
  std::filesystem::create_directories(dir.parent_path());
  const CliResult r = run_nanovllm("make-test-model --out " + tmp.string() + " --tokenizer " +
                                   qwen3_tokenizer_dir().string() + " --seed 21 --config-override "
                                   "'{\"vocab_size\": 151936, \"tie_word_embeddings\": false}'");
  NANOVLLM_CHECK(r.exit_code == 0, "make-test-model failed: ", r.err);
  std::error_code ec;
  std::filesystem::rename(tmp, dir, ec);  // fails harmlessly when another process got there first
  std::error_code ignored;
  std::filesystem::remove_all(tmp, ignored);
  NANOVLLM_CHECK(std::filesystem::exists(dir / "tokenizer.json"), "no text model at ", dir.string(), ": ",
                 ec.message());
  return dir;
}

}  // namespace nanovllm::testing
