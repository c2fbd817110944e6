// The layers of src/nanovllm form a DAG (DESIGN.md, "Layers of the code"): a directory includes only
// itself and the directories below it. This test reads every source file and fails naming file:line for
// each `#include "nanovllm/<dir>/..."` that points up or sideways.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/process_scratch_dir.h"

namespace {

namespace fs = std::filesystem;

// Lowest first: each layer may include the ones before it. tokenizer, chat and grammar sit beside the
// stack on core alone; llm and server may use them. A new directory must be added here.
const std::map<std::string, std::set<std::string>>& allowed_includes() {
  static const std::map<std::string, std::set<std::string>> table = [] {
    std::map<std::string, std::set<std::string>> t;
    std::set<std::string> below;
    for (const char* layer : {"core", "kernels", "model", "sparse", "engine", "runner", "llm", "server"}) {
      below.insert(layer);
      t[layer] = below;
      if (std::string(layer) == "runner") below.insert({"tokenizer", "chat", "grammar"});  // llm and server use them
    }
    t["tokenizer"] = {"core", "tokenizer"};
    t["chat"] = {"core", "chat"};
    t["grammar"] = {"core", "grammar"};
    return t;
  }();
  return table;
}

// "dir/file.h:12: includes nanovllm/runner/ (engine may include only ...)" for each bad include under root.
std::vector<std::string> layering_violations(const fs::path& root) {
  static const std::regex include_re(R"(^\s*#\s*include\s*["<]nanovllm/([A-Za-z0-9_]+)/)");
  const auto& table = allowed_includes();
  std::vector<std::string> errors;
  for (const fs::directory_entry& dir : fs::directory_iterator(root)) {
    if (!dir.is_directory()) continue;
    const std::string layer = dir.path().filename().string();
    const auto allowed = table.find(layer);
    if (allowed == table.end()) {
      errors.push_back(layer + ": a directory the layer table does not know; add it there");
      continue;
    }
    for (const fs::directory_entry& f : fs::recursive_directory_iterator(dir.path())) {
      const std::string ext = f.path().extension().string();
      if (!f.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh")) continue;
      std::ifstream in(f.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        std::smatch m;
        if (!std::regex_search(line, m, include_re) || allowed->second.contains(m[1].str())) continue;
        std::string may;
        for (const std::string& a : allowed->second) may += (may.empty() ? "" : ", ") + a;
        errors.push_back(fs::relative(f.path(), root).string() + ":" + std::to_string(n) + ": includes nanovllm/" +
                         m[1].str() + "/ (" + layer + " may include only " + may + ")");
      }
    }
  }
  std::sort(errors.begin(), errors.end());
  return errors;
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

TEST(Layering, SourcesIncludeOnlyLowerLayers) {
  const fs::path root = fs::path(NANOVLLM_SOURCE_DIR) / "nanovllm";
  ASSERT_TRUE(fs::is_directory(root / "core")) << root;
  const std::vector<std::string> errors = layering_violations(root);
  EXPECT_TRUE(errors.empty()) << errors.size() << " include(s) break the layering:\n" << join(errors);
}

// The checker itself: a tree with one include pointing up, one sideways and one unknown directory.
TEST(Layering, CheckerReportsViolations) {
  const nanovllm::testing::ProcessScratchDir scratch("nanovllm-layering");
  const fs::path& root = scratch.path();
  fs::create_directories(root / "engine");
  fs::create_directories(root / "kernels" / "cuda");
  fs::create_directories(root / "tokenizer");
  fs::create_directories(root / "mystery");
  std::ofstream(root / "engine" / "ok.h") << "#include \"nanovllm/core/error.h\"\n#include \"nanovllm/model/config.h\"\n";
  std::ofstream(root / "kernels" / "cuda" / "bad.cu") << "// x\n#include \"nanovllm/engine/sequence.h\"\n";
  std::ofstream(root / "tokenizer" / "bad.cpp") << "#include <string>\n  #  include \"nanovllm/chat/utf8.h\"\n";
  const std::vector<std::string> errors = layering_violations(root);
  ASSERT_EQ(errors.size(), 3u) << join(errors);
  EXPECT_NE(errors[0].find("kernels/cuda/bad.cu:2: includes nanovllm/engine/"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("mystery"), std::string::npos) << errors[1];
  EXPECT_NE(errors[2].find("tokenizer/bad.cpp:2: includes nanovllm/chat/"), std::string::npos) << errors[2];
}

}  // namespace
