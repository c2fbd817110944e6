#include "nanovllm/core/build_info.h"

namespace nanovllm {

bool sanitized_build() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#else
  return false;
#endif
}

}  // namespace nanovllm
