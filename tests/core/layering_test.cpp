// The layers of the code form a DAG (docs/design.md, "Layers"): a directory includes only itself and the
// directories below it. This test reads every source file of src/nanovllm, tools/ and python/ and fails naming
// file:line for each `#include "nanovllm/<dir>/..."` (or "<dir>/..." inside tools/) that points up or sideways.
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

using LayerTable = std::map<std::string, std::set<std::string>>;

// src/nanovllm, lowest first: each layer may include the ones before it. tokenizer, chat and grammar sit beside the
// stack on core alone; llm and server may use them. A new directory must be added here.
const LayerTable& src_layers() {
  static const LayerTable table = [] {
    LayerTable t;
    std::set<std::string> below;
    for (const char* layer :
         {"core", "kernels", "model", "sparse", "engine", "parallel", "offload", "runner", "llm", "server"}) {
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

// tools/ sits on top: eval drives an engine (llm and below, no server); the CLI may use everything. python/'s
// extension (python/src) wraps the engine the way llm/ offers it: no server, no tools.
const LayerTable& tools_layers() {
  static const LayerTable table = [] {
    std::set<std::string> eval = src_layers().at("llm");
    eval.insert("eval");
    std::set<std::string> cli = src_layers().at("server");
    cli.insert({"eval", "cli"});
    return LayerTable{{"eval", eval}, {"cli", cli}};
  }();
  return table;
}

const LayerTable& python_layers() {
  static const LayerTable table = {{"src", src_layers().at("llm")}, {"nanovllm", {}}, {"tests", {}}};
  return table;
}

bool is_source(const fs::directory_entry& f) {
  const std::string ext = f.path().extension().string();
  return f.is_regular_file() && (ext == ".h" || ext == ".cpp" || ext == ".cu" || ext == ".cuh");
}

// A folder with no C++ or CUDA file (pip's python/nanovllm.egg-info, __pycache__) is not a layer.
bool holds_sources(const fs::path& dir) {
  for (const fs::directory_entry& f : fs::recursive_directory_iterator(dir))
    if (is_source(f)) return true;
  return false;
}

// "dir/file.h:12: includes runner/ (engine may include only ...)" for each bad include under root.
std::vector<std::string> layering_violations(const fs::path& root, const LayerTable& table = src_layers()) {
  // A quoted include with a directory: "nanovllm/<layer>/..." or, inside tools/, "<dir>/...".
  static const std::regex include_re(R"(^\s*#\s*include\s*"(?:nanovllm/)?([A-Za-z0-9_]+)/)");
  std::vector<std::string> errors;
  for (const fs::directory_entry& dir : fs::directory_iterator(root)) {
    if (!dir.is_directory() || !holds_sources(dir.path())) continue;
    const std::string layer = dir.path().filename().string();
    const auto allowed = table.find(layer);
    if (allowed == table.end()) {
      errors.push_back(layer + ": a directory the layer table does not know; add it there");
      continue;
    }
    for (const fs::directory_entry& f : fs::recursive_directory_iterator(dir.path())) {
      if (!is_source(f)) continue;
      std::ifstream in(f.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        std::smatch m;
        if (!std::regex_search(line, m, include_re) || allowed->second.contains(m[1].str())) continue;
        std::string may;
        for (const std::string& a : allowed->second) may += (may.empty() ? "" : ", ") + a;
        errors.push_back(fs::relative(f.path(), root).string() + ":" + std::to_string(n) + ": includes " +
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
  const fs::path root = fs::path(NANOVLLM_SOURCE_DIR) / "src" / "nanovllm";
  ASSERT_TRUE(fs::is_directory(root / "core")) << root;
  const std::vector<std::string> errors = layering_violations(root);
  EXPECT_TRUE(errors.empty()) << errors.size() << " include(s) break the layering:\n" << join(errors);
}

TEST(Layering, ToolsAndPythonSitOnTop) {
  const fs::path tools = fs::path(NANOVLLM_SOURCE_DIR) / "tools";
  const fs::path python = fs::path(NANOVLLM_SOURCE_DIR) / "python";
  ASSERT_TRUE(fs::is_directory(tools / "cli") && fs::is_directory(python / "src")) << NANOVLLM_SOURCE_DIR;
  std::vector<std::string> errors = layering_violations(tools, tools_layers());
  for (std::string& e : layering_violations(python, python_layers())) errors.push_back(std::move(e));
  EXPECT_TRUE(errors.empty()) << errors.size() << " include(s) break the layering:\n" << join(errors);
}

// The checker itself: a tree with one include pointing up, one sideways and one unknown directory of sources (a
// folder without sources, like pip's egg-info, is not a layer).
TEST(Layering, CheckerReportsViolations) {
  const nanovllm::testing::ProcessScratchDir scratch("nanovllm-layering");
  const fs::path& root = scratch.path();
  fs::create_directories(root / "engine");
  fs::create_directories(root / "kernels" / "cuda");
  fs::create_directories(root / "tokenizer");
  fs::create_directories(root / "mystery");
  fs::create_directories(root / "pkg.egg-info");
  std::ofstream(root / "mystery" / "m.h") << "#pragma once\n";
  std::ofstream(root / "pkg.egg-info" / "PKG-INFO") << "Name: pkg\n";
  std::ofstream(root / "engine" / "ok.h") << "#include \"nanovllm/core/error.h\"\n#include \"nanovllm/model/config.h\"\n"
                                          << "#include <nlohmann/json.hpp>\n#include \"local.h\"\n";
  std::ofstream(root / "kernels" / "cuda" / "bad.cu") << "// x\n#include \"nanovllm/engine/sequence.h\"\n";
  std::ofstream(root / "tokenizer" / "bad.cpp") << "#include <string>\n  #  include \"nanovllm/chat/utf8.h\"\n";
  const std::vector<std::string> errors = layering_violations(root);
  ASSERT_EQ(errors.size(), 3u) << join(errors);
  EXPECT_NE(errors[0].find("kernels/cuda/bad.cu:2: includes engine/"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("mystery"), std::string::npos) << errors[1];
  EXPECT_NE(errors[2].find("tokenizer/bad.cpp:2: includes chat/"), std::string::npos) << errors[2];
}

// tools/: eval may not reach the server; the CLI may.
TEST(Layering, CheckerKnowsTheTools) {
  const nanovllm::testing::ProcessScratchDir scratch("nanovllm-layering-tools");
  const fs::path& root = scratch.path();
  fs::create_directories(root / "eval");
  fs::create_directories(root / "cli");
  std::ofstream(root / "eval" / "bad.cpp") << "#include \"nanovllm/server/server.h\"\n#include \"eval/ok.h\"\n";
  std::ofstream(root / "cli" / "ok.cpp") << "#include \"nanovllm/server/server.h\"\n#include \"eval/runner.h\"\n";
  const std::vector<std::string> errors = layering_violations(root, tools_layers());
  ASSERT_EQ(errors.size(), 1u) << join(errors);
  EXPECT_NE(errors[0].find("eval/bad.cpp:1: includes server/"), std::string::npos) << errors[0];
}

}  // namespace
