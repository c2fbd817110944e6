// The `nanovllm` subcommands. Each register_* adds its CLI11 subcommand and the callback that runs it.
#pragma once

#include <CLI/CLI.hpp>

namespace nanovllm::cli {

void register_generate(CLI::App& app);
void register_make_test_model(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_detokenize(CLI::App& app);
void register_chat(CLI::App& app);
void register_serve(CLI::App& app);
void register_eval(CLI::App& app);
void register_worker(CLI::App& app);             // `nanovllm worker`: nodes 1.. of a multi-host group
void register_options(CLI::App& app);            // `nanovllm options`: the engine option table
void register_bench_engine(CLI::App& bench);     // `nanovllm bench throughput|latency`
void register_bench_tokenizer(CLI::App& bench);  // `nanovllm bench tokenizer`
void register_bench_offload(CLI::App& bench);    // `nanovllm bench offload`
void register_bench_serve(CLI::App& bench);      // `nanovllm bench serve`
void register_bench_grammar(CLI::App& bench);    // `nanovllm bench grammar`

}  // namespace nanovllm::cli
