// nanovllm serve: the OpenAI-compatible HTTP server (src/nanovllm/server). Prints the address it listens on
// ("serving MODEL on http://HOST:PORT", to stdout, flushed: --port 0 picks a free port) and runs until
// SIGINT/SIGTERM, then shuts down gracefully (new requests get 503, in-flight ones finish within
// --shutdown-grace seconds or are aborted, the listener closes); a second signal exits at once.
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <thread>

#include "commands.h"
#include "engine_options.h"
#include "option_checks.h"
#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm_engine.h"
#include "nanovllm/server/server.h"

namespace nanovllm::cli {

void register_serve(CLI::App& app) {
  struct Options {
    EngineOptions engine;
    server::ServerConfig server;
    double max_body_mib = 8;
    std::string api_key;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, "
                                     "/v1/chat/completions, /v1/models, /health, /metrics); MODEL may come first, "
                                     "as in `nanovllm serve MODEL`");
  add_engine_options(*cmd, opt->engine, /*model_positional=*/true);
  cmd->add_option("--host", opt->server.host, "address to bind (use 0.0.0.0 to accept remote clients)")
      ->capture_default_str();
  cmd->add_option("--port", opt->server.port, "TCP port; 0 picks a free one (printed)")
      ->check(in_range(0, 65535))
      ->capture_default_str();
  CLI::Option* api_key = cmd->add_option("--api-key", opt->api_key,
                                         "require 'Authorization: Bearer KEY' on /v1/* (an empty KEY is an error)");
  cmd->add_option("--served-model-name", opt->server.served_model_names,
                  "model name(s) clients use (default: the --model path and its last component)");
  cmd->add_option("--max-concurrent-requests", opt->server.max_concurrent_requests,
                  "sequences generated at once, a request taking one per prompt and choice (prompts x n); more "
                  "get 429, a request larger than this 400")
      ->check(in_range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--max-body-mib", opt->max_body_mib, "request body limit (413 beyond)")
      ->check(in_range_above(0, 1024))
      ->capture_default_str();
  cmd->add_option("--shutdown-grace", opt->server.shutdown_grace_s,
                  "seconds in-flight requests get to finish on SIGINT/SIGTERM (a second signal exits at once)")
      ->check(in_range(0, 86400))
      ->capture_default_str();
  cmd->add_option("--max-n", opt->server.limits.max_n, "largest 'n' accepted")
      ->check(in_range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--max-request-prompt-tokens", opt->server.limits.max_request_prompt_tokens,
                  "prompt tokens one request may ask to process: its prompts' lengths times n; more get 400")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--max-request-output-tokens", opt->server.limits.max_request_output_tokens,
                  "output tokens one request may ask for: max_tokens times prompts times n (times 1 + top_logprobs "
                  "with logprobs); more get 400, and a default max_tokens is cut to fit")
      ->check(at_least(1))
      ->capture_default_str();
  cmd->add_option("--tool-call-parser", opt->server.tool_call_parser,
                  "how chat answers' tool calls are parsed into message.tool_calls: auto (from the chat template), "
                  "hermes (Qwen3's <tool_call>{json}), qwen3_coder (<function=...> XML), none")
      ->check(CLI::IsMember({"auto", "hermes", "qwen3_coder", "none"}))
      ->capture_default_str();
  cmd->add_option("--reasoning-parser", opt->server.reasoning_parser,
                  "qwen3: <think>...</think> becomes message.reasoning_content (none: left in content)")
      ->check(CLI::IsMember({"qwen3", "none"}));

  cmd->callback([opt, api_key] {
    opt->server.max_body_bytes = static_cast<size_t>(opt->max_body_mib * (1 << 20));
    // Given but empty is usually an unset variable (--api-key "$KEY"): refuse rather than serve without auth.
    if (api_key->count() > 0) {
      NANOVLLM_CHECK(!opt->api_key.empty(), "--api-key is empty (an unset variable?): give a key, or leave "
                     "--api-key out to serve without one");
      opt->server.api_key = opt->api_key;
    }
    // Every thread started from here on inherits the blocked signals; this thread takes them with sigwait.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    LLMEngine engine(opt->engine.to_config());
    server::Server srv(engine, opt->server);
    const int port = srv.start();
    std::printf("serving %s on http://%s:%d\n", opt->engine.model.c_str(), opt->server.host.c_str(), port);
    std::fflush(stdout);
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "%s: shutting down (in-flight requests get %.0f s; signal again to exit now)\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", opt->server.shutdown_grace_s);
    // A second signal while the in-flight requests drain ends the process at once, as a second Ctrl-C
    // does in vLLM: no destructors, the shell's 128 + signal status.
    std::thread([signals] {
      int again = 0;
      sigwait(&signals, &again);
      static const char kMsg[] = "second signal: exiting now\n";
      (void)!::write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
      ::_exit(128 + again);
    }).detach();
    srv.shutdown();
  });
}

}  // namespace nanovllm::cli
