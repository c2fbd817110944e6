// nanovllm — command-line front end. Errors a user can cause print "error: ..." and exit 1.
#include <cstdio>
#include <exception>

#include "commands.h"
#include "nanovllm/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"nano-vLLM C++: fast LLM inference for Qwen3-family Hugging Face checkpoints"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "nanovllm 0.1.0");
  nanovllm::cli::register_generate(app);
  nanovllm::cli::register_make_test_model(app);
  nanovllm::cli::register_tokenize(app);
  nanovllm::cli::register_detokenize(app);
  nanovllm::cli::register_chat(app);
  nanovllm::cli::register_serve(app);
  nanovllm::cli::register_eval(app);
  CLI::App* bench = app.add_subcommand("bench", "benchmarks: throughput, latency, tokenizer");
  bench->require_subcommand(1);
  nanovllm::cli::register_bench_engine(*bench);
  nanovllm::cli::register_bench_offload(*bench);
  nanovllm::cli::register_bench_tokenizer(*bench);
  nanovllm::cli::register_bench_serve(*bench);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const nanovllm::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
