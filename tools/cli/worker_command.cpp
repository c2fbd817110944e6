// nanovllm worker: runs this host's ranks of a tensor-parallel group that spans hosts, for node 0's engine
// (docs/tensor_parallel.md, section 7). Same model and engine options as node 0's command, plus
// --node-rank K (1..nnodes-1). Returns when node 0's engine ends.
#include "commands.h"
#include "engine_options.h"
#include "nanovllm/core/error.h"
#include "nanovllm/llm/llm_engine.h"

namespace nanovllm::cli {

void register_worker(CLI::App& app) {
  auto opt = std::make_shared<EngineOptions>();
  CLI::App* cmd = app.add_subcommand(
      "worker", "run this host's ranks of a multi-host tensor-parallel group (--nnodes > 1, --node-rank >= 1) "
                "for node 0's engine; give node 0's model and engine options");
  add_engine_options(*cmd, *opt);
  cmd->callback([opt] {
    EngineConfig config = opt->to_config();
    NANOVLLM_CHECK(config.parallel.nnodes > 1 && config.parallel.node_rank >= 1,
                   "worker: give --nnodes N (> 1) and --node-rank K (1..N-1), with node 0's --dist-init-addr "
                   "HOST:PORT; node 0 runs generate, serve or bench");
    LLMEngine::run_worker(std::move(config));
  });
}

}  // namespace nanovllm::cli
