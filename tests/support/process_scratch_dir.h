#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace nanovllm::testing {

// A directory under the system temp dir owned by this test process: <tmp>/<prefix>-<pid>.
// ctest runs every test case in its own process, so a directory that outlives its process
// leaks once per test case; this one is removed when the process exits normally. A forked
// child that exits through the same static destructors leaves its parent's directory alone.
class ProcessScratchDir {
 public:
  explicit ProcessScratchDir(const std::string& prefix)
      : owner_(::getpid()),
        path_(std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(owner_))) {
    std::filesystem::create_directories(path_);
  }
  ~ProcessScratchDir() {
    if (::getpid() != owner_) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ProcessScratchDir(const ProcessScratchDir&) = delete;
  ProcessScratchDir& operator=(const ProcessScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  pid_t owner_;
  std::filesystem::path path_;
};

}  // namespace nanovllm::testing
