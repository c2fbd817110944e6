// nanovllm — command-line front end. Every user error prints "error: ..." and exits 1 (errors.h).
#include <exception>

#include "commands.h"
#include "errors.h"

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
  nanovllm::cli::register_worker(app);
  nanovllm::cli::register_options(app);
  CLI::App* bench = app.add_subcommand("bench", "benchmarks: throughput, latency, tokenizer, grammar");
  bench->require_subcommand(1);
  nanovllm::cli::register_bench_engine(*bench);
  nanovllm::cli::register_bench_offload(*bench);
  nanovllm::cli::register_bench_tokenizer(*bench);
  nanovllm::cli::register_bench_serve(*bench);
  nanovllm::cli::register_bench_grammar(*bench);
  nanovllm::cli::add_debug_flag(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return nanovllm::cli::report_parse_error(app, e);
  } catch (const std::exception& e) {
    // The callbacks' errors (nanovllm::Error and anything else) are all reported the same way.
    nanovllm::cli::print_error(e, nanovllm::cli::debug_requested(app));
    return 1;
  }
  return 0;
}
