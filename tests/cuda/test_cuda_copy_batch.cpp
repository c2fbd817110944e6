// ops::copy_batch on CUDA against the same copies done with memcpy on the host: random bytes (never zeros),
// 16-byte-aligned copies (the vector path) and misaligned or odd-sized ones (the byte path), copies of several
// blocks' chunks, empty copies, and more copies than one launch takes. Exact: every byte of the destination buffer,
// including those no copy writes (poisoned), must equal the host's.
#include "cuda_test_util.h"

#include <cstring>

#include "nanovllm/kernels/copy_ops.h"

namespace nanovllm {
namespace {

TEST(CudaCopyBatch, EqualsHostMemcpy) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(7);
  for (const int num_copies : {1, 5, 130, 300}) {  // 130 and 300: more than one launch's 128
    constexpr int64_t kSrcBytes = 1 << 20;
    std::vector<uint8_t> src(kSrcBytes);
    for (auto& b : src) b = static_cast<uint8_t>(1 + rng() % 255);
    // Destinations one after the other with random gaps; sources anywhere in the source buffer.
    std::vector<int64_t> dst_at, src_at, bytes;
    int64_t end = 0;
    for (int i = 0; i < num_copies; ++i) {
      const bool aligned = rng() % 2 == 0;
      int64_t n = 0;
      switch (rng() % 5) {
        case 0: n = 0; break;
        case 1: n = 1 + static_cast<int64_t>(rng() % 40); break;             // a few bytes (fp8 scales)
        case 2: n = 16 * (1 + static_cast<int64_t>(rng() % 64)); break;      // rows of a decode buffer
        case 3: n = 1024 * (1 + static_cast<int64_t>(rng() % 300)); break;  // up to 300 KB: several chunks
        default: n = 1 + static_cast<int64_t>(rng() % 5000); break;         // odd sizes
      }
      int64_t d = end + static_cast<int64_t>(rng() % 64), s = static_cast<int64_t>(rng() % (kSrcBytes - n));
      if (aligned) d = (d + 15) / 16 * 16, s = s / 16 * 16, n = n / 16 * 16;
      dst_at.push_back(d), src_at.push_back(s), bytes.push_back(n);
      end = d + n;
    }
    const int64_t dst_bytes = end + 64;
    std::vector<uint8_t> want(static_cast<size_t>(dst_bytes), 0xab);
    for (int i = 0; i < num_copies; ++i)
      std::memcpy(want.data() + dst_at[i], src.data() + src_at[i], static_cast<size_t>(bytes[i]));

    cuda_test::DeviceTensor d_src(DType::kU8, {kSrcBytes}, src), d_dst(DType::kU8, {dst_bytes});
    d_dst.fill_bytes(0xab);
    std::vector<ops::ByteCopy> copies;
    for (int i = 0; i < num_copies; ++i)
      copies.push_back({static_cast<char*>(d_dst.view().data()) + dst_at[i],
                        static_cast<const char*>(d_src.view().data()) + src_at[i], static_cast<size_t>(bytes[i])});
    ops::copy_batch(copies, Device::cuda(0), cuda_test::on());
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint8_t> got = d_dst.download<uint8_t>();
    ASSERT_EQ(got.size(), want.size());
    int64_t wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i];
    EXPECT_EQ(wrong, 0) << num_copies << " copies, " << dst_bytes << " destination bytes";
  }
}

}  // namespace
}  // namespace nanovllm
