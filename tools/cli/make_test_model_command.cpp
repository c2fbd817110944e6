// nanovllm make-test-model: a random-weight checkpoint in the Hugging Face hub layout.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "nanovllm/core/error.h"
#include "nanovllm/model/test_model.h"

namespace nanovllm::cli {

void register_make_test_model(CLI::App& app) {
  struct Options {
    std::string out, preset = "tiny", overrides;
    uint64_t seed = 0;
    int64_t shard_max_bytes = 0;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("make-test-model", "write a random-weight checkpoint (config.json, "
                                     "generation_config.json, bf16 safetensors) in the hub's layout");
  cmd->add_option("--out", opt->out, "output directory")->required();
  cmd->add_option("--preset", opt->preset, "tiny | qwen3-0.6b | qwen3-4b | qwen3-8b")->capture_default_str();
  cmd->add_option("--seed", opt->seed, "weights are a function of the seed")->capture_default_str();
  cmd->add_option("--config-override", opt->overrides,
                  "JSON object merged into the preset's config.json, e.g. '{\"num_key_value_heads\": 1}'");
  cmd->add_option("--shard-max-bytes", opt->shard_max_bytes, "write sharded safetensors of at most this size");
  cmd->callback([opt] {
    nlohmann::json config = test_model_config(opt->preset);
    if (!opt->overrides.empty()) {
      nlohmann::json patch;
      try {
        patch = nlohmann::json::parse(opt->overrides);
      } catch (const nlohmann::json::exception& e) {
        NANOVLLM_FAIL("--config-override is not valid JSON: ", e.what());
      }
      NANOVLLM_CHECK(patch.is_object(), "--config-override must be a JSON object");
      config.merge_patch(patch);
    }
    write_test_model(opt->out, config, opt->seed, opt->shard_max_bytes);
    std::fprintf(stderr, "wrote %s test model (seed %llu) to %s\n", opt->preset.c_str(),
                 static_cast<unsigned long long>(opt->seed), opt->out.c_str());
  });
}

}  // namespace nanovllm::cli
