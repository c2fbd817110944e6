// The record's links must resolve: README.md, bench/README.md, docs/*.md and the kept bench narratives
// (bench/results/**/*.md) cite files by relative links, and the docs name repository paths in code spans
// (`bench/results/...`, `scripts/...`). Pruning bench/results/ or moving a file must not leave one dangling.
// This test reads those markdown files and fails naming file:line for each link or path that does not exist.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "support/process_scratch_dir.h"

namespace {

namespace fs = std::filesystem;

const fs::path kRepo = NANOVLLM_SOURCE_DIR;

// The markdown files whose links are checked, relative to the repository root.
std::vector<fs::path> record_files() {
  std::vector<fs::path> files = {"README.md", "bench/README.md"};
  for (const char* dir : {"docs", "bench/results"}) {
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(kRepo / dir)) {
      if (e.is_regular_file() && e.path().extension() == ".md") files.push_back(fs::relative(e.path(), kRepo));
    }
  }
  return files;
}

bool is_external(const std::string& target) {
  static const std::regex scheme(R"(^[a-z]+:)");
  return target.empty() || target[0] == '#' || std::regex_search(target, scheme);
}

// "docs/x.md:12: link ../bench/y.md -> bench/y.md does not exist" for each dangling link in `file`.
// Inline links [text](target) and reference definitions [name]: target resolve against the file's folder;
// code spans naming a repository path (`scripts/bench/device_bench.sh`) against the root, but only in the
// current docs: the dated narratives may name files the code has since removed.
std::vector<std::string> dangling_links(const fs::path& file) {
  static const std::regex inline_link(R"(\]\(([^)\s]+)\))");
  static const std::regex reference(R"(^\s*\[[^\]]+\]:\s*(\S+))");
  static const std::regex path_span(
      R"(`((?:bench|docs|scripts|src|tests|tools|assets|examples|python|dev)/[^`\s*<>{}|]+)`)");
  const bool check_spans = file.string().rfind("bench/results/", 0) != 0;
  std::vector<std::string> errors;
  std::ifstream in(kRepo / file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string where = file.string() + ":" + std::to_string(n) + ": ";
    std::vector<std::string> links;
    for (std::sregex_iterator m(line.begin(), line.end(), inline_link), end; m != end; ++m) links.push_back((*m)[1]);
    std::smatch ref;
    if (std::regex_search(line, ref, reference)) links.push_back(ref[1]);
    for (const std::string& target : links) {
      if (is_external(target)) continue;
      const fs::path resolved = (file.parent_path() / target.substr(0, target.find('#'))).lexically_normal();
      if (!fs::exists(kRepo / resolved)) {
        errors.push_back(where + "link " + target + " -> " + resolved.string() + " does not exist");
      }
    }
    if (!check_spans) continue;
    for (std::sregex_iterator m(line.begin(), line.end(), path_span), end; m != end; ++m) {
      std::string path = (*m)[1];
      path = path.substr(0, path.find(':'));  // src/x.cpp:123 names a line
      if (!fs::exists(kRepo / path)) errors.push_back(where + "path `" + path + "` does not exist");
    }
  }
  return errors;
}

TEST(DocLinks, EveryRelativeLinkInTheRecordResolves) {
  const std::vector<fs::path> files = record_files();
  ASSERT_GT(files.size(), 10u) << "the record's markdown files were not found under " << kRepo;
  std::vector<std::string> errors;
  for (const fs::path& f : files) {
    ASSERT_TRUE(fs::exists(kRepo / f)) << f;
    for (std::string& e : dangling_links(f)) errors.push_back(std::move(e));
  }
  std::string all;
  for (const std::string& e : errors) all += e + "\n";
  EXPECT_TRUE(errors.empty()) << all;
}

TEST(DocLinks, FindsADanglingLink) {
  // The checker itself must catch a missing target, or the test above proves nothing.
  const nanovllm::testing::ProcessScratchDir scratch("nanovllm-doc-links");
  {
    std::ofstream out(scratch.path() / "probe.md");
    out << "see [a](missing-file.md) and [b](probe.md) and [web](https://example.com) and [c](#anchor)\n"
        << "[ref]: ../" << scratch.path().filename().string() << "/also-missing.json\n"
        << "`scripts/no-such-script.sh` names a path; `scripts/bench/device_bench.sh` exists\n";
  }
  const std::vector<std::string> errors = dangling_links(fs::relative(scratch.path() / "probe.md", kRepo));
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_NE(errors[0].find("missing-file.md"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("also-missing.json"), std::string::npos) << errors[1];
  EXPECT_NE(errors[2].find("scripts/no-such-script.sh"), std::string::npos) << errors[2];
}

}  // namespace
