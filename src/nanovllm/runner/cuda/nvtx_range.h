// A scoped NVTX range (header-only NVTX 3 from the CUDA toolkit): names the runner's steps for Nsight
// tools, e.g. `ncu --nvtx --nvtx-include "prefill/"` profiles only prefill steps. Costs a few ns when
// no tool is attached.
#pragma once

#include <nvtx3/nvToolsExt.h>

namespace nanovllm {

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace nanovllm
