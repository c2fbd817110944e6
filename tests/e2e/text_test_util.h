// Shared by the text I/O end-to-end tests: a tiny random model that has the Qwen3 tokenizer, and a runner
// for the `nanovllm` binary that feeds stdin and keeps stdout and stderr apart.
#pragma once

#include <filesystem>
#include <string>

#include "support/run_command.h"  // nanovllm_binary()

namespace nanovllm::testing {

std::filesystem::path qwen3_tokenizer_dir();  // tests/data/qwen3-tokenizer
// `nanovllm make-test-model --tokenizer tests/data/qwen3-tokenizer` (vocab 151936, hidden 64, untied),
// written once into the build directory.
std::filesystem::path text_model_dir();

struct CliResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};
// Runs `nanovllm <args>` through /bin/sh (args are shell words) with `stdin_text` on stdin.
CliResult run_nanovllm(const std::string& args, const std::string& stdin_text = "");
// The same with environment assignments in front ("NANOVLLM_LOG_LEVEL=debug").
CliResult run_nanovllm_env(const std::string& env, const std::string& args, const std::string& stdin_text = "");
// Writes `content` to a fresh file under the test scratch directory; returns its path.
std::filesystem::path write_temp_file(const std::string& name, const std::string& content);

}  // namespace nanovllm::testing
