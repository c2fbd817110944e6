// Test checkpoints for end-to-end tests: written once per test binary into a temp dir that its processes share
// (read-only: copy a checkpoint before editing it), with write_test_model (the same bytes `nanovllm make-test-model`
// writes, which the HF golden script used).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nanovllm/engine/sampling_params.h"

namespace nanovllm::testing {

// Greedy decoding of exactly max_tokens tokens (EOS ignored), with the top `logprobs` logprobs of each step.
inline SamplingParams greedy(int64_t max_tokens, int64_t logprobs = 0) {
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = max_tokens;
  sp.logprobs = logprobs;
  return sp;
}

// tests/data, or $NANOVLLM_TEST_DATA when set (test binaries run from a copied build tree).
std::filesystem::path test_data_dir();
// The names of the models in tests/data/golden/models.json.
std::vector<std::string> golden_model_names();
// The entry `name` of tests/data/golden/models.json.
nlohmann::json golden_model_spec(const std::string& name);
// Directory of the checkpoint for a models.json entry (written on first use).
std::filesystem::path golden_model_dir(const std::string& name);
// A tiny checkpoint from the "tiny" preset with `override` merged in (written on first use per key);
// `qwen3_tokenizer`: with tests/data/qwen3-tokenizer's files beside it (the override then sets a vocab_size that
// covers it and its eos_token_id).
std::filesystem::path tiny_model_dir(const std::string& key, const nlohmann::json& override, uint64_t seed,
                                     bool qwen3_tokenizer = false);
// The same for any make-test-model preset (e.g. "glm4-tiny").
std::filesystem::path preset_model_dir(const std::string& preset, const std::string& key,
                                       const nlohmann::json& override, uint64_t seed, bool qwen3_tokenizer = false);
// Random prompts of the given lengths with ids in [0, vocab), deterministic per seed (std::mt19937).
std::vector<std::vector<int32_t>> random_prompts(const std::vector<int>& lens, int vocab, uint32_t seed);
// Parsed golden file tests/data/golden/<name>.json (or the file of the entry named by its `golden` field),
// or null json when it is missing.
nlohmann::json load_golden(const std::string& name);

}  // namespace nanovllm::testing
