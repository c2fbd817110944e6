#include "nanovllm/core/error.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace nanovllm::detail {

static const char* short_path(const char* file) {
  // Keep the path from "nanovllm/" or "tests/" on, so messages do not leak the build machine's layout.
  for (const char* root : {"src/nanovllm/", "tools/", "tests/"}) {
    if (const char* p = std::strstr(file, root)) return p;
  }
  return file;
}

void throw_error(const char* file, int line, const std::string& msg) {
  throw Error(msg, std::string(short_path(file)) + ":" + std::to_string(line));
}

void abort_invariant(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "nanovllm: internal error at %s:%d: %s %s\n", short_path(file), line, cond,
               msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace nanovllm::detail
