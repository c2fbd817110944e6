// nanovllm chat: an interactive conversation on stdin/stdout. Each turn renders the whole history with the
// model's chat template (add_generation_prompt), encodes it without extra special tokens (the template has
// them), and streams the reply as the engine samples it (IncrementalDetokenizer: whole UTF-8 characters
// only). Commands: /reset, /think on|off (Qwen3 enable_thinking), /exit; EOF ends the session.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "engine_options.h"
#include "errors.h"
#include "nanovllm/chat/chat_template.h"
#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm_engine.h"
#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm::cli {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

struct ChatSession {
  LLMEngine& engine;
  const Tokenizer& tok;
  const chat::ChatTemplate& tmpl;
  SamplingParams params;
  std::string system;
  nlohmann::ordered_json history = nlohmann::ordered_json::array();
  std::optional<bool> enable_thinking;  // unset: the template's default

  void reset() {
    history = nlohmann::ordered_json::array();
    if (!system.empty()) history.push_back({{"role", "system"}, {"content", system}});
  }

  // One user turn: streams the reply to stdout; on success appends both messages to the history.
  void turn(const std::string& user) {
    nlohmann::ordered_json messages = history;
    messages.push_back({{"role", "user"}, {"content", user}});
    chat::ChatTemplateOptions topt;
    topt.add_generation_prompt = true;
    topt.enable_thinking = enable_thinking;
    const std::string prompt = tmpl.render(messages, topt);
    const int64_t id = engine.add_request(tok.encode(prompt, /*add_special_tokens=*/false), params);

    IncrementalDetokenizer detok(tok, /*skip_special_tokens=*/true);
    std::vector<int32_t> reply;
    FinishReason reason = FinishReason::kNone;
    engine.set_delta_callback([&](const RequestDelta& d) {
      if (d.request_id != id) return;
      reply.insert(reply.end(), d.new_token_ids.begin(), d.new_token_ids.end());
      const std::string piece = detok.add(d.new_token_ids);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
      if (d.finished) reason = d.finish_reason;
    });
    while (engine.has_unfinished()) engine.step();
    engine.set_delta_callback(nullptr);
    const std::string tail = detok.finish();
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    if (reason == FinishReason::kLength)
      std::fprintf(stderr, "[reply cut at %zu tokens (--max-tokens or --max-model-len)]\n", reply.size());

    history = std::move(messages);
    history.push_back({{"role", "assistant"}, {"content", tok.decode(reply, /*skip_special_tokens=*/true)}});
  }
};

}  // namespace

void register_chat(CLI::App& app) {
  struct Options {
    EngineOptions engine;
    SamplingOptions sampling;
    std::string system;
  };
  auto opt = std::make_shared<Options>();
  // Qwen3's recommended non-thinking sampling; --temperature 0 makes it greedy.
  opt->sampling.temperature = 0.7f;
  opt->sampling.top_p = 0.8f;
  opt->sampling.top_k = 20;
  opt->sampling.max_tokens = 1024;
  CLI::App* cmd = app.add_subcommand("chat", "interactive chat on stdin (commands: /reset, /think on|off, /exit)");
  add_engine_options(*cmd, opt->engine);
  add_sampling_options(*cmd, opt->sampling);
  cmd->add_option("--system", opt->system, "system prompt");

  cmd->callback([opt, cmd] {
    const SamplingParams params = opt->sampling.to_params();
    LLMEngine engine(opt->engine.to_config());
    SamplingOptions::check_token_ids(params, engine.model_config().vocab_size);
    ChatSession s{engine, engine.tokenizer(), engine.chat_template(), params, opt->system, {}, std::nullopt};
    s.reset();
    const bool interactive = ::isatty(STDIN_FILENO) != 0;
    if (interactive) std::fprintf(stderr, "chat with %s — /reset, /think on|off, /exit\n", opt->engine.model.c_str());

    std::string line;
    while (true) {
      if (interactive) std::fprintf(stderr, ">>> ");
      if (!std::getline(std::cin, line)) break;
      const std::string text = trim(line);
      if (text.empty()) continue;
      if (text == "/exit" || text == "/quit") break;
      if (text == "/reset") {
        s.reset();
        std::fprintf(stderr, "[history cleared]\n");
        continue;
      }
      if (text.rfind("/think", 0) == 0) {
        const std::string arg = trim(text.substr(6));
        if (arg == "on" || arg == "off") {
          s.enable_thinking = arg == "on";
          std::fprintf(stderr, "[thinking %s]\n", arg.c_str());
        } else {
          std::fprintf(stderr, "usage: /think on|off\n");
        }
        continue;
      }
      if (text[0] == '/') {
        std::fprintf(stderr, "unknown command %s (try /reset, /think on|off, /exit)\n", text.c_str());
        continue;
      }
      // A bad turn (e.g. invalid UTF-8, the history outgrew max_model_len) is reported; the session goes on
      // without it.
      try {
        s.turn(text);
      } catch (const Error& e) {
        engine.set_delta_callback(nullptr);
        print_error(e, debug_requested(*cmd));
      }
    }
  });
}

}  // namespace nanovllm::cli
