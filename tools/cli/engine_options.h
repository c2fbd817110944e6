// CLI options shared by the subcommands that run the engine (generate, chat, serve, bench).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "nanovllm/engine/engine_options.h"
#include "nanovllm/engine/sampling_params.h"
#include "nanovllm/llm/llm_engine.h"

namespace nanovllm::cli {

// The options of the subcommands that run an engine (generate, chat, serve, bench, eval, worker): the model
// directory, and one flag per row of the engine's option table (engine/engine_options.h). Bound to a CLI11
// command by add_engine_options, which keeps pointers into this object: use it where it was bound.
struct EngineOptions {
  std::string model;

  // The table's defaults with every flag that was given applied, then resolved as the engine resolves them.
  // Throws nanovllm::Error naming the flag for what the flag checks cannot see.
  EngineConfig to_config() const;

  struct Flag {
    const EngineOption* option = nullptr;
    std::string name;          // one of option->cli_flags (or option->flag())
    OptionValue value;         // what CLI11 parsed (the CLI's unit and kind)
    CLI::Option* parsed = nullptr;
  };
  std::vector<Flag> flags;  // filled by add_engine_options; sized once, so CLI11 may bind to the values
};

struct SamplingOptions {
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;
  float temperature = 1.0f;
  int64_t top_k = -1;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int64_t seed = -1;  // -1: unseeded
  bool ignore_eos = false;
  int64_t logprobs = 0;
  std::vector<int64_t> stop_token_ids;
  std::vector<std::string> logit_bias;  // "ID:BIAS" items

  // Throws nanovllm::Error naming the flag for what the option checks cannot see: --min-tokens above
  // --max-tokens, malformed --logit-bias items.
  SamplingParams to_params() const;
  // The checks that need the model: token ids of --stop-token-ids and --logit-bias inside the vocabulary.
  static void check_token_ids(const SamplingParams& params, int64_t vocab_size);
};

// `model_positional`: the model directory may also be given as the first positional argument
// (`nanovllm serve MODEL`, as `vllm serve MODEL`).
void add_engine_options(CLI::App& cmd, EngineOptions& o, bool model_positional = false);
void add_sampling_options(CLI::App& cmd, SamplingOptions& o);

// "5:10, 7:-100" -> {5: 10, 7: -100}; throws nanovllm::Error naming `option` for anything else (a bias
// outside [-100, 100], an id given twice, more than kMaxLogitBias entries).
std::map<int32_t, float> parse_logit_bias(const std::vector<std::string>& items,
                                          const std::string& option = "--logit-bias");

// "1, 2,3" -> {1, 2, 3}; anything else (empty, non-digits, overflow) throws nanovllm::Error naming `option`.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& option = "--prompt-ids");

// A JSON file holding a list of token-id lists; a clear error for anything else.
std::vector<std::vector<int32_t>> read_token_id_lists(const std::string& path);

}  // namespace nanovllm::cli
