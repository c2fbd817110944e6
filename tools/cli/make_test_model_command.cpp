// nanovllm make-test-model: a random-weight checkpoint in the Hugging Face hub layout.
#include <cstdio>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "option_checks.h"
#include "nanovllm/core/error.h"
#include "nanovllm/model/test_model.h"
#include "nanovllm/tokenizer/tokenizer.h"

namespace nanovllm::cli {

void register_make_test_model(CLI::App& app) {
  struct Options {
    std::string out, preset = "tiny", overrides, tokenizer_dir, layout = "hf";
    uint64_t seed = 0;
    int64_t shard_max_bytes = 0;
    bool fp8 = false;
  };
  auto opt = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("make-test-model", "write a random-weight checkpoint (config.json, "
                                     "generation_config.json, bf16 safetensors) in the hub's layout");
  cmd->add_option("--out", opt->out, "output directory")->required();
  cmd->add_option("--preset", opt->preset,
                  "tiny | qwen3-0.6b | qwen3-4b | qwen3-8b | qwen3-moe-tiny | qwen3-30b-a3b | qwen3-235b-a22b | "
                  "glm4-tiny | glm4-9b | dca-tiny | qwen2.5-7b-1m")
      ->capture_default_str();
  cmd->add_option("--layout", opt->layout,
                  "hf: transformers-native tensor names; chatglm: THUDM's original ChatGLM layout (glm4-* presets; "
                  "the same weights as hf for the same seed)")
      ->check(CLI::IsMember({"hf", "chatglm"}))
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "weights are a function of the seed")->capture_default_str();
  cmd->add_option("--config-override", opt->overrides,
                  "JSON object merged into the preset's config.json, e.g. '{\"num_key_value_heads\": 1}'");
  cmd->add_flag("--fp8", opt->fp8,
               "write a block-scaled FP8 checkpoint as Qwen3-*-FP8 ship: projections in F8_E4M3 with F32 "
               "weight_scale_inv per 128x128 block (the bf16 values quantized), a quantization_config in config.json");
  cmd->add_option("--shard-max-bytes", opt->shard_max_bytes, "write sharded safetensors of at most this size")
      ->check(at_least(0));
  cmd->add_option("--tokenizer", opt->tokenizer_dir,
                  "copy tokenizer.json, tokenizer_config.json (and chat_template.jinja) from this directory; "
                  "eos_token_id becomes the tokenizer's EOS; vocab_size must cover the tokenizer's ids");
  cmd->callback([opt] {
    nlohmann::json config = test_model_config(opt->preset);
    if (opt->fp8) config["quantization_config"] = fp8_quantization_config();  // before the overrides: editable
    std::optional<Tokenizer> tok;
    if (!opt->tokenizer_dir.empty()) {
      NANOVLLM_CHECK(std::filesystem::is_regular_file(std::filesystem::path(opt->tokenizer_dir) / "tokenizer.json"),
                     "--tokenizer: ", opt->tokenizer_dir, " has no tokenizer.json");
      tok = Tokenizer::from_model_dir(opt->tokenizer_dir);
      if (const auto eos = tok->eos_token_id()) config["eos_token_id"] = *eos;
      if (const auto bos = tok->bos_token_id()) config["bos_token_id"] = *bos;
    }
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
    if (tok) {
      const int64_t vocab = config.value("vocab_size", int64_t{0});
      NANOVLLM_CHECK(vocab >= tok->vocab_size(), "--tokenizer: the tokenizer has ", tok->vocab_size(),
                     " ids but the model's vocab_size is ", vocab,
                     "; raise it, e.g. --config-override '{\"vocab_size\": 151936}'");
    }
    if (opt->layout == "chatglm") config = chatglm_test_model_config(config);  // after the overrides
    write_test_model(opt->out, config, opt->seed, opt->shard_max_bytes);
    if (tok) {
      for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
        const auto src = std::filesystem::path(opt->tokenizer_dir) / name;
        if (std::filesystem::is_regular_file(src))
          std::filesystem::copy_file(src, std::filesystem::path(opt->out) / name,
                                     std::filesystem::copy_options::overwrite_existing);
      }
    }
    std::fprintf(stderr, "wrote %s test model (seed %llu) to %s\n", opt->preset.c_str(),
                 static_cast<unsigned long long>(opt->seed), opt->out.c_str());
  });
}

}  // namespace nanovllm::cli
