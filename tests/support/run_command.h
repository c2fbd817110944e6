// run_command(cmd): runs a shell command line (popen, so /bin/sh), returns its exit code and its stdout and
// stderr together. nanovllm_binary(): the `nanovllm` binary of this build; run_cli(args) runs it.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace nanovllm::testing {

struct CommandResult {
  int exit_code = -1;  // -1: did not exit normally (or could not start)
  std::string output;  // stdout and stderr
};

inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* pipe = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  while (size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) r.output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::filesystem::path nanovllm_binary() { return std::filesystem::path(NANOVLLM_BINARY_DIR) / "tools" / "nanovllm"; }

inline CommandResult run_cli(const std::string& args) { return run_command(nanovllm_binary().string() + " " + args); }

}  // namespace nanovllm::testing
