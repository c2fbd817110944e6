// nanovllm generate: prompts (text or token ids) in, generated tokens out, as text or one JSON object per prompt.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "engine_options.h"
#include "progress.h"
#include "text_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/model/layer_taps.h"
#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm::cli {
namespace {

// DIR/taps.safetensors: the recorded taps and, as metadata, the tokens they belong to (the prompt, then
// every generated token but the last, which never went through the model) and how they were computed.
void write_taps(const TapRecorder& taps, const std::filesystem::path& dir, const RequestOutput& out,
                const LLMEngine& engine, const SamplingParams& params) {
  std::vector<int32_t> tokens = out.prompt_token_ids;
  if (!out.token_ids.empty()) tokens.insert(tokens.end(), out.token_ids.begin(), out.token_ids.end() - 1);
  NANOVLLM_CHECK(taps.rows() == static_cast<int64_t>(tokens.size()), "--dump-taps: recorded ", taps.rows(),
                 " token rows for ", tokens.size(), " tokens (was the request preempted?)");
  std::string ids, layers;
  for (int32_t t : tokens) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  for (const auto& [key, tap] : taps.taps())
    if (key.second == TapPoint::kInput) layers += (layers.empty() ? "" : ",") + std::to_string(key.first);
  const EngineConfig& c = engine.config();
  const bool offloaded = c.offload.enabled && engine.is_offloaded(static_cast<int64_t>(out.prompt_token_ids.size()), params);
  const std::filesystem::path path = dir / "taps.safetensors";
  taps.write(path, {{"format", "nanovllm-taps-v1"},
                    {"token_ids", ids},
                    {"num_prompt_tokens", std::to_string(out.prompt_token_ids.size())},
                    {"layers", layers},
                    {"backend", to_string(c.model.backend)},
                    {"path", offloaded ? "offload" : "paged"},
                    {"model", c.model.path.string()}});
  std::fprintf(stderr, "wrote taps of %zu tokens x %zu layers to %s\n", tokens.size(),
               taps.taps().size() / kTapPoints.size(), path.string().c_str());
}

}  // namespace

void register_generate(CLI::App& app) {
  struct Options {
    EngineOptions engine;
    std::vector<std::string> prompt_ids, prompts;
    std::string prompt_ids_file;
    SamplingOptions sampling;
    bool json = false;
    std::string dump_taps, tap_layers;
    std::string json_schema_file, regex, grammar_file;  // structured outputs
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("generate", "generate continuations of prompts");
  add_engine_options(*cmd, opt->engine);
  add_sampling_options(*cmd, opt->sampling);
  CLI::Option* ids_opt =
      cmd->add_option("--prompt-ids", opt->prompt_ids, "comma-separated token ids; repeat for a batch");
  CLI::Option* text_opt = cmd->add_option("--prompt", opt->prompts,
                                          "a text prompt (needs the model's tokenizer.json); repeat for a batch");
  cmd->add_option("--prompt-ids-file", opt->prompt_ids_file,
                  "a JSON file holding a list of token-id lists (after any --prompt/--prompt-ids)");
  cmd->add_flag("--json", opt->json,
                "print one JSON object per prompt (token_ids, text, finish_reason, logprobs)");
  cmd->add_option("--dump-taps", opt->dump_taps,
                  "write every layer's input, q/k/v after RoPE, attention output (before o_proj) and output "
                  "for every token of one prompt to DIR/taps.safetensors (fp32; runs eagerly; see README)");
  cmd->add_option("--tap-layers", opt->tap_layers, "with --dump-taps: only these layers, e.g. 0,3 (default all)");
  CLI::Option* schema_opt = cmd->add_option("--json-schema", opt->json_schema_file,
                                            "constrain the output to JSON valid for this JSON Schema file "
                                            "(docs/structured_output.md)");
  CLI::Option* regex_opt = cmd->add_option("--regex", opt->regex, "constrain the output to match this regular expression");
  CLI::Option* grammar_opt = cmd->add_option("--grammar", opt->grammar_file,
                                             "constrain the output to this EBNF grammar file (root rule `root`)");
  schema_opt->excludes(regex_opt)->excludes(grammar_opt);
  regex_opt->excludes(grammar_opt);

  cmd->callback([cmd, opt, ids_opt, text_opt] {
    NANOVLLM_CHECK(!opt->prompt_ids.empty() || !opt->prompts.empty() || !opt->prompt_ids_file.empty(),
                   "generate: give --prompt, --prompt-ids or --prompt-ids-file");
    NANOVLLM_CHECK(opt->tap_layers.empty() || !opt->dump_taps.empty(), "generate: --tap-layers needs --dump-taps");
    SamplingParams params = opt->sampling.to_params();
    if (!opt->json_schema_file.empty() || !opt->regex.empty() || !opt->grammar_file.empty()) {
      StructuredOutputsParams so;
      if (!opt->json_schema_file.empty()) so.json = read_text_file(opt->json_schema_file, "--json-schema");
      if (!opt->regex.empty()) so.regex = opt->regex;
      if (!opt->grammar_file.empty()) so.grammar = read_text_file(opt->grammar_file, "--grammar");
      params.structured_outputs = std::move(so);
    }
    EngineConfig config = opt->engine.to_config();
    if (!opt->dump_taps.empty()) config.model.enforce_eager = true;  // taps run every step eagerly anyway
    LLM llm(std::move(config));
    SamplingOptions::check_token_ids(params, llm.engine().model_config().vocab_size);
    const bool with_text = !opt->prompts.empty() || llm.engine().has_tokenizer();

    // Prompts in command-line order, --prompt and --prompt-ids interleaved as given.
    std::vector<std::vector<int32_t>> prompts;
    size_t next_ids = 0, next_text = 0;
    for (const CLI::Option* o : cmd->parse_order()) {
      if (o == ids_opt) {
        prompts.push_back(parse_token_ids(opt->prompt_ids.at(next_ids++)));
      } else if (o == text_opt) {
        const size_t i = next_text++;
        try {
          prompts.push_back(llm.encode(opt->prompts.at(i)));
        } catch (const Error& e) {
          throw e.prefixed(detail::concat("--prompt ", i, ": "));
        }
      }
    }

    if (!opt->prompt_ids_file.empty()) {
      for (std::vector<int32_t>& p : read_token_id_lists(opt->prompt_ids_file)) prompts.push_back(std::move(p));
    }

    std::unique_ptr<TapRecorder> taps;
    if (!opt->dump_taps.empty()) {
      NANOVLLM_CHECK(prompts.size() == 1, "generate: --dump-taps records one sequence; give one prompt, got ",
                     prompts.size());
      const int64_t num_layers = llm.engine().model_config().num_hidden_layers;
      taps = std::make_unique<TapRecorder>(opt->tap_layers.empty() ? std::vector<int64_t>{}
                                                                   : parse_tap_layers(opt->tap_layers, num_layers));
      std::error_code ec;
      std::filesystem::create_directories(opt->dump_taps, ec);
      NANOVLLM_CHECK(std::filesystem::is_directory(opt->dump_taps), "--dump-taps: cannot create directory '",
                     opt->dump_taps, "'");
      llm.engine().set_layer_taps(taps.get());
    }

    // The engine ends a request at max_model_len: say so when --max-tokens asks for more than fits.
    const int64_t max_len = llm.engine().config().model.max_model_len;
    int64_t longest = 0, most_tokens = 0;
    for (const auto& p : prompts) {
      const auto n = static_cast<int64_t>(p.size());
      longest = std::max(longest, n);
      most_tokens += std::clamp<int64_t>(max_len - n, 0, params.max_tokens);
    }
    if (longest > 0 && longest < max_len && params.max_tokens > max_len - longest)
      std::fprintf(stderr,
                   "warning: --max-tokens %lld is capped at %lld: the model length (%lld, --max-model-len) minus "
                   "the %sprompt of %lld tokens\n",
                   static_cast<long long>(params.max_tokens), static_cast<long long>(max_len - longest),
                   static_cast<long long>(max_len), prompts.size() > 1 ? "longest " : "", static_cast<long long>(longest));

    ProgressLine progress(most_tokens, ProgressLine::stderr_is_terminal());
    if (ProgressLine::stderr_is_terminal())
      llm.engine().set_delta_callback([&](const RequestDelta& d) {
        progress.add(static_cast<int64_t>(d.new_token_ids.size()));
      });
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<RequestOutput> outputs = llm.generate(prompts, params);
    llm.engine().set_delta_callback(nullptr);
    progress.finish();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (taps) {
      llm.engine().set_layer_taps(nullptr);
      write_taps(*taps, opt->dump_taps, outputs.at(0), llm.engine(), params);
    }

    int64_t generated = 0;
    for (const RequestOutput& o : outputs) {
      generated += static_cast<int64_t>(o.token_ids.size());
      const std::string text = with_text ? llm.decode(o.token_ids) : std::string();
      if (opt->json) {
        nlohmann::json j;
        j["token_ids"] = o.token_ids;
        if (with_text) j["text"] = text;
        j["finish_reason"] = to_string(o.finish_reason);
        j["prompt_tokens"] = o.prompt_token_ids.size();
        j["cached_tokens"] = o.num_cached_tokens;
        if (params.logprobs > 0) {
          nlohmann::json steps = nlohmann::json::array();
          for (const auto& step : o.logprobs) {
            nlohmann::json top = nlohmann::json::array();
            for (const TokenLogprob& lp : step) top.push_back({{"id", lp.id}, {"logprob", lp.logprob}});
            steps.push_back(std::move(top));
          }
          j["logprobs"] = std::move(steps);
        }
        std::cout << j.dump() << "\n";
      } else if (with_text) {
        std::cout << "[" << o.request_id << "] " << o.prompt_token_ids.size() << " prompt tokens -> "
                  << o.token_ids.size() << " tokens (" << to_string(o.finish_reason) << "):\n"
                  << text << "\n";
      } else {
        std::cout << "[" << o.request_id << "] " << o.prompt_token_ids.size() << " prompt tokens -> "
                  << o.token_ids.size() << " tokens (" << to_string(o.finish_reason) << "):";
        for (int32_t id : o.token_ids) std::cout << ' ' << id;
        std::cout << "\n";
      }
    }
    std::cout.flush();  // the outputs before the summary, also when both streams go to one pipe
    std::fprintf(stderr, "generated %lld tokens for %zu prompts in %.3f s (%.1f tok/s, backend %s)\n",
                 static_cast<long long>(generated), outputs.size(), seconds, seconds > 0 ? generated / seconds : 0.0,
                 to_string(llm.engine().config().model.backend));
  });
}

}  // namespace nanovllm::cli
