// nanovllm options: the engine's option table (engine/engine_options.h) — every setting with its CLI flag,
// Python keyword, default and help. --markdown prints the README's table.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "nanovllm/engine/engine_options.h"

namespace nanovllm::cli {

void register_options(CLI::App& app) {
  auto markdown = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("options", "list the engine options (the flags of generate, chat, serve, bench, "
                                     "eval and worker; LLM()'s keywords in Python)");
  cmd->add_flag("--markdown", *markdown, "print the README's table");
  cmd->callback([markdown] {
    if (*markdown) {
      std::printf("%s", engine_options_markdown().c_str());
      return;
    }
    for (const EngineOption& o : engine_options()) {
      const std::string def = o.default_text.empty() ? o.format(o.default_value()) : o.default_text;
      std::printf("%-28s %-30s default %s\n    %s%s\n", o.name.c_str(), o.flag().c_str(), def.c_str(), o.help.c_str(),
                  o.choices ? (": " + o.choices()).c_str() : "");
    }
  });
}

}  // namespace nanovllm::cli
