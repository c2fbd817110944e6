#include "nanovllm/core/backend.h"

#include "nanovllm/core/error.h"

namespace nanovllm {

Backend parse_backend(const std::string& name) {
  if (name == "cpu") return Backend::kCpu;
  if (name == "cuda") return Backend::kCuda;
  NANOVLLM_FAIL("unknown backend '", name, "' (expected cpu or cuda)");
}

const char* to_string(Backend b) { return b == Backend::kCpu ? "cpu" : "cuda"; }

}  // namespace nanovllm
