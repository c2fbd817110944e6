#include "nanovllm/kernels/copy_ops.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/op_checks.h"
#if NANOVLLM_WITH_CUDA
#include "nanovllm/kernels/cuda/copy_batch.h"
#include "nanovllm/kernels/cuda/device_context.h"
#endif

namespace nanovllm::ops {
namespace {

// Whether some copy's destination overlaps another copy's destination or any copy's source: a sweep over the
// byte ranges by start address.
bool destinations_overlap(std::span<const ByteCopy> copies) {
  struct Range {
    uintptr_t begin, end;
    bool dst;
  };
  std::vector<Range> ranges;
  ranges.reserve(2 * copies.size());
  for (const ByteCopy& c : copies) {
    if (c.bytes == 0) continue;
    const auto d = reinterpret_cast<uintptr_t>(c.dst), s = reinterpret_cast<uintptr_t>(c.src);
    ranges.push_back({d, d + c.bytes, true});
    ranges.push_back({s, s + c.bytes, false});
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  uintptr_t dst_end = 0, src_end = 0;  // the furthest end of the ranges seen so far, by kind
  for (const Range& r : ranges) {
    if (r.begin < dst_end || (r.dst && r.begin < src_end)) return true;
    (r.dst ? dst_end : src_end) = std::max(r.dst ? dst_end : src_end, r.end);
  }
  return false;
}

}  // namespace

void copy_batch(std::span<const ByteCopy> copies, Device dev, Stream s) {
  for (size_t i = 0; i < copies.size(); ++i)
    NANOVLLM_CHECK(copies[i].bytes == 0 || (copies[i].dst != nullptr && copies[i].src != nullptr), "copy_batch: copy ",
                   i, " of ", copies[i].bytes, " bytes has a null pointer");
  // The kernel runs the copies at once, in any order.
  NANOVLLM_CHECK(!destinations_overlap(copies), "copy_batch: a copy's destination overlaps another copy or a source");
  if (dev.is_cuda()) {
#if NANOVLLM_WITH_CUDA
    static_cast<void>(cuda_ops::context_of(s));
    cuda_ops::copy_batch(copies, s);
    return;
#else
    no_cuda("copy_batch", dev);
#endif
  }
  for (const ByteCopy& c : copies)
    if (c.bytes) std::memcpy(c.dst, c.src, c.bytes);
}

}  // namespace nanovllm::ops
