#include "nanovllm/model/weight_parts.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/fp8_block.h"

namespace nanovllm {
namespace {

// Converts `count` dense elements; memcpy-based loads so unaligned mmap data is fine.
void convert(const void* src, DType sd, void* dst, DType dd, size_t count) {
  if (sd == dd) {
    std::memcpy(dst, src, count * dtype_size(sd));
    return;
  }
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < count; ++i) {
    float f;
    if (sd == DType::kF32) {
      std::memcpy(&f, s + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, s + 2 * i, 2);
      f = sd == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
    if (dd == DType::kF32) {
      std::memcpy(d + 4 * i, &f, 4);
    } else {
      const uint16_t h = dd == DType::kBF16 ? f32_to_bf16(f) : f32_to_f16(f);
      std::memcpy(d + 2 * i, &h, 2);
    }
  }
}

// fn(i) for i in [0, n) on up to `threads` threads.
template <class Fn>
void parallel_for(int64_t n, int threads, Fn fn) {
  const int t = static_cast<int>(std::clamp<int64_t>(n, 1, std::max(threads, 1)));
  std::vector<std::thread> pool;
  for (int k = 1; k < t; ++k)
    pool.emplace_back([&, k] {
      for (int64_t i = k; i < n; i += t) fn(i);
    });
  for (int64_t i = 0; i < n; i += t) fn(i);
  for (auto& th : pool) th.join();
}

}  // namespace

PartSource read_part(const std::string& name, const TensorInfo& t, const TensorInfo* scale, bool quantize,
                     int threads) {
  PartSource p{t.data, t.dtype, t.shape, {}, {}};
  if (t.dtype == DType::kF8E4M3) {
    NANOVLLM_CHECK(scale != nullptr && t.shape.ndim == 2, "fp8 tensor '", name, "' without block scales");
    p.scale.resize(static_cast<size_t>(scale->shape.numel()));
    convert(scale->data, scale->dtype, p.scale.data(), DType::kF32, p.scale.size());
    const int64_t scale_cols = scale->shape[1];
    for (size_t i = 0; i < p.scale.size(); ++i)
      NANOVLLM_CHECK(std::isfinite(p.scale[i]) && p.scale[i] >= 0.0f, "block scales '", fp8_scale_name(name),
                     "' in ", scale->file.string(), " hold ", p.scale[i], " at block [", static_cast<int64_t>(i) / scale_cols,
                     ", ", static_cast<int64_t>(i) % scale_cols, "]; scales must be finite and >= 0");
    return p;
  }
  if (!quantize) return p;
  NANOVLLM_CHECK(t.shape.ndim == 2, "quantizing the ", t.shape.ndim, "-D tensor '", name, "' to fp8");
  const int64_t rows = t.shape[0], cols = t.shape[1], bands = fp8_blocks(rows);
  p.dtype = DType::kF8E4M3;
  p.codes.resize(static_cast<size_t>(rows * cols));
  p.scale.resize(static_cast<size_t>(bands * fp8_blocks(cols)));
  const size_t esz = dtype_size(t.dtype);
  parallel_for(bands, threads, [&](int64_t b) {  // one band of 128 rows: its row of blocks
    const int64_t r0 = b * kFp8BlockSize, n = std::min(kFp8BlockSize, rows - r0);
    std::vector<float> band(static_cast<size_t>(n * cols));
    convert(static_cast<const char*>(t.data) + static_cast<size_t>(r0 * cols) * esz, t.dtype, band.data(),
            DType::kF32, band.size());
    quantize_fp8_blocks(band.data(), n, cols, p.codes.data() + r0 * cols, p.scale.data() + b * fp8_blocks(cols));
  });
  p.data = p.codes.data();
  return p;
}

void read_part_elements(const PartSource& p, int64_t first, int64_t count, void* out, DType out_dtype) {
  if (!p.fp8()) {
    NANOVLLM_CHECK(out_dtype != DType::kF8E4M3, "read_part_elements: a dense tensor read as fp8 codes");
    convert(static_cast<const char*>(p.data) + static_cast<size_t>(first) * dtype_size(p.dtype), p.dtype, out,
            out_dtype, static_cast<size_t>(count));
    return;
  }
  const auto* codes = static_cast<const uint8_t*>(p.data);
  if (out_dtype == DType::kF8E4M3) {
    std::memcpy(out, codes + first, static_cast<size_t>(count));
    return;
  }
  constexpr int64_t kChunk = 4096;  // dequantize through a small f32 buffer
  float buf[kChunk];
  auto* dst = static_cast<char*>(out);
  for (int64_t done = 0; done < count; done += kChunk) {
    const int64_t n = std::min(kChunk, count - done);
    dequantize_fp8_run(codes, p.scale.data(), p.shape[1], first + done, n, buf);
    convert(buf, DType::kF32, dst + static_cast<size_t>(done) * dtype_size(out_dtype), out_dtype,
            static_cast<size_t>(n));
  }
}

ShardSlice fp8_block_slice(const ShardSlice& slice, const std::string& name) {
  ShardSlice s = slice;
  NANOVLLM_CHECK(slice.pad == 0, "fp8 weight '", name, "' cannot be padded");
  for (IndexRange& r : s.ranges) {
    NANOVLLM_CHECK(r.begin % kFp8BlockSize == 0 && r.end % kFp8BlockSize == 0, "tensor parallel: this rank's ",
                   slice.axis == ShardSlice::Axis::kColumns ? "columns" : "rows", " [", r.begin, ", ", r.end,
                   ") of fp8 weight '", name, "' do not start and end on 128-element block boundaries, so its "
                   "block scales cannot be split with it; use a tensor_parallel_size that keeps every rank's share "
                   "a multiple of 128, or --quantization none");
    r.begin /= kFp8BlockSize;
    r.end /= kFp8BlockSize;
  }
  return s;
}

}  // namespace nanovllm
