#include "support/test_models.h"

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>

#include "nanovllm/core/error.h"
#include "nanovllm/model/test_model.h"
#include "support/process_scratch_dir.h"

namespace nanovllm::testing {
namespace {

std::filesystem::path golden_dir() { return test_data_dir() / "golden"; }

// Models written here are shared by the tests of one process and removed when it exits.
const std::filesystem::path& scratch_root() {
  static const ProcessScratchDir root("nanovllm-e2e");
  return root.path();
}

std::filesystem::path write_once(const std::string& key, const nlohmann::json& config, uint64_t seed) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const auto dir = scratch_root() / key;
  if (!std::filesystem::exists(dir / "config.json")) write_test_model(dir, config, seed);
  return dir;
}

}  // namespace

std::filesystem::path test_data_dir() {
  const char* env = std::getenv("NANOVLLM_TEST_DATA");
  return env && *env ? std::filesystem::path(env) : std::filesystem::path(NANOVLLM_TEST_DATA);
}

std::vector<std::string> golden_model_names() {
  std::ifstream f(golden_dir() / "models.json");
  const nlohmann::json spec = nlohmann::json::parse(f);
  std::vector<std::string> names;
  for (const auto& m : spec["models"]) names.push_back(m["name"]);
  return names;
}

nlohmann::json golden_model_spec(const std::string& name) {
  std::ifstream f(golden_dir() / "models.json");
  const auto spec = nlohmann::json::parse(f);
  for (const auto& m : spec["models"])
    if (m["name"] == name) return m;
  NANOVLLM_FAIL("no model '", name, "' in models.json");
}

std::filesystem::path golden_model_dir(const std::string& name) {
  const auto m = golden_model_spec(name);
  nlohmann::json config = test_model_config(m["preset"].get<std::string>());
  config.merge_patch(m["override"]);
  if (m.value("layout", "hf") == "chatglm") config = chatglm_test_model_config(config);  // as --layout chatglm
  return write_once("golden-" + name, config, m["seed"].get<uint64_t>());
}

std::filesystem::path tiny_model_dir(const std::string& key, const nlohmann::json& override, uint64_t seed) {
  return preset_model_dir("tiny", key, override, seed);
}

std::filesystem::path preset_model_dir(const std::string& preset, const std::string& key,
                                       const nlohmann::json& override, uint64_t seed) {
  nlohmann::json config = test_model_config(preset);
  config.merge_patch(override);
  return write_once(preset + "-" + key, config, seed);
}

std::vector<std::vector<int32_t>> random_prompts(const std::vector<int>& lens, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> prompts;
  for (int n : lens) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    prompts.push_back(std::move(p));
  }
  return prompts;
}

nlohmann::json load_golden(const std::string& name) {
  // An entry in another checkpoint layout shares the file of the entry it names in `golden`.
  std::ifstream f(golden_dir() / (golden_model_spec(name).value("golden", name) + ".json"));
  if (!f) return nullptr;
  return nlohmann::json::parse(f);
}

}  // namespace nanovllm::testing
