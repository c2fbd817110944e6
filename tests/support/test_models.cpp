#include "support/test_models.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>

#include "nanovllm/core/error.h"
#include "nanovllm/model/test_model.h"

namespace nanovllm::testing {
namespace {

std::filesystem::path golden_dir() { return test_data_dir() / "golden"; }

// The folder every process of this test binary shares its checkpoints in:
// <tmp>/nanovllm-test-models/<binary>-<hash of its path>-<its mtime and size>. ctest runs each test case in its own
// process, so writing a checkpoint (and copying the 11 MB tokenizer) once per binary instead of once per process
// saves ~0.4 s of every such process (~1 s under the sanitizers). A rebuilt binary gets a fresh folder (the
// generator may have changed) and removes the folders its older builds left.
std::filesystem::path shared_root() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  NANOVLLM_CHECK(!ec, "test models: cannot read /proc/self/exe: ", ec.message());
  const auto stamp = static_cast<uint64_t>(fs::last_write_time(exe).time_since_epoch().count());
  const std::string family =
      exe.filename().string() + "-" + std::to_string(std::hash<std::string>{}(exe.string()) % 1000000007u);
  const fs::path base = fs::temp_directory_path() / "nanovllm-test-models";
  const fs::path root = base / (family + "-" + std::to_string(stamp) + "-" + std::to_string(fs::file_size(exe)));
  if (!fs::exists(root)) {
    fs::create_directories(base);
    for (const auto& e : fs::directory_iterator(base))
      if (e.path().filename().string().rfind(family + "-", 0) == 0) fs::remove_all(e.path(), ec);  // older builds
    fs::create_directories(root);
  }
  return root;
}

// Writes the checkpoint into a private folder and publishes it with one rename, so that a concurrent process
// sees a whole checkpoint or none; the loser of a race drops its copy.
std::filesystem::path write_once(const std::string& key, const nlohmann::json& config, uint64_t seed,
                                 bool qwen3_tokenizer) {
  namespace fs = std::filesystem;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  static const fs::path root = shared_root();
  const fs::path dir = root / (qwen3_tokenizer ? key + "-qwen3-tokenizer" : key);
  if (fs::exists(dir / "config.json")) return dir;
  const fs::path tmp = root / (dir.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  write_test_model(tmp, config, seed);
  if (qwen3_tokenizer)
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(test_data_dir() / "qwen3-tokenizer" / name, tmp / name);
  if (::rename(tmp.c_str(), dir.c_str()) != 0) {
    NANOVLLM_CHECK(errno == EEXIST || errno == ENOTEMPTY, "test models: cannot publish ", dir.string(), ": ",
                   std::strerror(errno));
    fs::remove_all(tmp);  // another process published it first
  }
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
  return write_once("golden-" + name, config, m["seed"].get<uint64_t>(), false);
}

std::filesystem::path tiny_model_dir(const std::string& key, const nlohmann::json& override, uint64_t seed,
                                     bool qwen3_tokenizer) {
  return preset_model_dir("tiny", key, override, seed, qwen3_tokenizer);
}

std::filesystem::path preset_model_dir(const std::string& preset, const std::string& key,
                                       const nlohmann::json& override, uint64_t seed, bool qwen3_tokenizer) {
  nlohmann::json config = test_model_config(preset);
  config.merge_patch(override);
  return write_once(preset + "-" + key, config, seed, qwen3_tokenizer);
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
