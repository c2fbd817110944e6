// Helpers of the CUDA mixture-of-experts tests (test_cuda_moe.cpp, test_cuda_moe_decode.cpp and its benchmark): host
// views, random routings, random expert weights (bf16 or block-scaled fp8), device and CPU groupings and their
// comparison, a device workspace.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "nanovllm/kernels/cpu/cpu_moe_ops.h"
#include "nanovllm/kernels/fp8_block.h"
#include "nanovllm/kernels/moe_ops.h"

namespace nanovllm::cuda_moe_test {

using cuda_test::DeviceTensor;

inline TensorView hv(std::vector<float>& v, Shape s) { return TensorView(v.data(), DType::kF32, s); }
inline TensorView hv(std::vector<int32_t>& v, Shape s) { return TensorView(v.data(), DType::kI32, s); }
inline TensorView hv(std::vector<uint16_t>& v, Shape s) { return TensorView(v.data(), DType::kBF16, s); }

// Random routing of T tokens to k distinct experts among the first `used` of E (the rest get nothing).
inline std::vector<int32_t> random_ids(int64_t T, int64_t E, int64_t k, int64_t used, std::mt19937& rng) {
  std::vector<int32_t> pool(static_cast<size_t>(used)), ids;
  std::iota(pool.begin(), pool.end(), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::shuffle(pool.begin(), pool.end(), rng);
    ids.insert(ids.end(), pool.begin(), pool.begin() + k);
  }
  (void)E;
  return ids;
}

// The expert weights a test runs: bf16, or block-scaled fp8 (docs/fp8.md: e4m3 codes, f32 scales per 128 x 128 block).
enum class ExpertDtype { kBf16, kFp8 };
inline std::string dtype_name(ExpertDtype d) { return d == ExpertDtype::kFp8 ? "fp8" : "bf16"; }
// fp8 experts need whole 128 x 128 blocks: shapes that are not run for kFp8.
inline bool fp8_shape(int64_t H, int64_t Im) { return H % kFp8BlockSize == 0 && Im % kFp8BlockSize == 0; }

// Stacked expert weights [E, R, C] on the host. The first `used` experts are random; the rest get no token and
// are never read (bf16: zeros; fp8: NaN codes and scales, which would poison any output that read them). f32:
// the values the CPU reference multiplies: the bf16 values, or each fp8 code x its scale as one f32 product (the
// CPU backend's dequantization).
struct HostExperts {
  ExpertDtype dtype = ExpertDtype::kBf16;
  int64_t E = 0, R = 0, C = 0;
  std::vector<float> f32;
  std::vector<uint16_t> bits;   // bf16: [E, R, C]
  std::vector<uint8_t> codes;   // fp8: [E, R, C]
  std::vector<float> scale;     // fp8: [E, R / 128, C / 128]
  Shape shape() const { return {E, R, C}; }
  Shape scale_shape() const { return {E, R / kFp8BlockSize, C / kFp8BlockSize}; }
};

// Random experts: bf16 uniform in [-amp, amp); fp8 the same values times 2^(r / 128 % 3 - 2) for row r (so the blocks
// get different scales, no larger than bf16's: larger weights make larger gate and up, and a one-ulp move of a rounded
// gate or up, which the summation order can cause, then moves the activation past the tolerances), quantized per
// block (quantize_fp8_blocks).
inline HostExperts random_experts(ExpertDtype dtype, int64_t E, int64_t R, int64_t C, int64_t used, std::mt19937& rng,
                                  float amp = 0.1f) {
  HostExperts h{dtype, E, R, C, {}, {}, {}, {}};
  const size_t n = static_cast<size_t>(E * R * C), per = static_cast<size_t>(R * C);
  if (dtype == ExpertDtype::kBf16) {
    cuda_test::Bf16Data d = cuda_test::random_bf16(static_cast<size_t>(used) * per, rng, -amp, amp);
    d.bits.resize(n, 0);
    d.f32.resize(n, 0.f);
    h.bits = std::move(d.bits);
    h.f32 = std::move(d.f32);
    return h;
  }
  const size_t blocks = static_cast<size_t>((R / kFp8BlockSize) * (C / kFp8BlockSize));
  h.codes.assign(n, 0x7f);  // e4m3 NaN
  h.scale.assign(static_cast<size_t>(E) * blocks, std::numeric_limits<float>::quiet_NaN());
  h.f32.assign(n, std::numeric_limits<float>::quiet_NaN());
  std::uniform_real_distribution<float> u(-amp, amp);
  std::vector<float> w(per);
  for (int64_t e = 0; e < used; ++e) {
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c)
        w[static_cast<size_t>(r * C + c)] = u(rng) * std::ldexp(1.0f, static_cast<int>(r / kFp8BlockSize % 3) - 2);
    uint8_t* q = h.codes.data() + static_cast<size_t>(e) * per;
    float* s = h.scale.data() + static_cast<size_t>(e) * blocks;
    quantize_fp8_blocks(w.data(), R, C, q, s);
    dequantize_fp8_run(q, s, C, 0, R * C, h.f32.data() + static_cast<size_t>(e) * per);
  }
  return h;
}

// The values as bf16 (each rounded once): for fp8, what the loader's bf16 dequantization gives (--quantization none).
inline cuda_test::Bf16Data bf16_values(const HostExperts& h) {
  cuda_test::Bf16Data d;
  d.bits.resize(h.f32.size());
  d.f32.resize(h.f32.size());
  for (size_t i = 0; i < h.f32.size(); ++i) {
    d.bits[i] = f32_to_bf16(h.f32[i]);
    d.f32[i] = bf16_to_f32(d.bits[i]);
  }
  return d;
}

// The experts on the device: bf16, or fp8 codes with their scales.
struct DeviceExperts {
  DeviceTensor w;
  std::optional<DeviceTensor> scale;
  explicit DeviceExperts(const HostExperts& h)
      : w(h.dtype == ExpertDtype::kFp8 ? DeviceTensor(DType::kF8E4M3, h.shape(), h.codes)
                                       : DeviceTensor(DType::kBF16, h.shape(), h.bits)) {
    if (h.dtype == ExpertDtype::kFp8) scale.emplace(DType::kF32, h.scale_shape(), h.scale);
  }
  TensorView view() const { return w.view(); }
  TensorView scale_view() const { return scale ? scale->view() : TensorView(); }
};
// A sparse layer's experts for the ops.
inline ops::MoeExpertWeights expert_weights(const DeviceExperts& gate_up, const DeviceExperts& down) {
  return {gate_up.view(), down.view(), gate_up.scale_view(), down.scale_view()};
}

// Device grouping buffers for P pairs over E experts.
struct DeviceGroups {
  DeviceTensor offsets, sorted, rows, active;
  DeviceGroups(int64_t P, int64_t E)
      : offsets(DType::kI32, {E + 1}), sorted(DType::kI32, {P}), rows(DType::kI32, {P}), active(DType::kI32, {E}) {}
  ops::MoeGroups view() const { return {offsets.view(), sorted.view(), rows.view(), active.view()}; }
};

// A device MoE workspace for T tokens, E experts, k per token (act / rows sized for H, Im).
struct DeviceMoeWorkspace {
  DeviceTensor logits, ids, weights, act, rows;
  DeviceGroups groups;
  DeviceMoeWorkspace(int64_t T, int64_t E, int64_t k, int64_t H, int64_t Im)
      : logits(DType::kBF16, {T, E}), ids(DType::kI32, {T, k}), weights(DType::kF32, {T, k}),
        act(DType::kBF16, {T * k, Im}), rows(DType::kBF16, {T * k, H}), groups(T * k, E) {
    for (DeviceTensor* d : {&logits, &ids, &weights, &act, &rows}) d->fill_bytes(0xff);
  }
  ops::MoeWorkspace view() const {
    return {logits.view(), ids.view(), weights.view(), groups.view(), act.view(), rows.view()};
  }
};

// The CPU grouping of `ids`.
struct HostGroups {
  std::vector<int32_t> offsets, sorted, rows, active;
  HostGroups(std::vector<int32_t>& ids, int64_t T, int64_t k, int64_t E)
      : offsets(static_cast<size_t>(E + 1)), sorted(static_cast<size_t>(T * k)), rows(static_cast<size_t>(T * k)),
        active(static_cast<size_t>(E)) {
    cpu::moe_group(view(), hv(ids, {T, k}));
  }
  ops::MoeGroups view() {
    const int64_t E = static_cast<int64_t>(active.size()), P = static_cast<int64_t>(sorted.size());
    return {hv(offsets, {E + 1}), hv(sorted, {P}), hv(rows, {P}), hv(active, {E})};
  }
};

// The device grouping equals the CPU's up to the order inside each expert; pair_rows is its inverse.
inline void expect_same_groups(const DeviceGroups& d, HostGroups& h, const std::string& what) {
  const auto off = d.offsets.download<int32_t>(), sorted = d.sorted.download<int32_t>();
  const auto rows = d.rows.download<int32_t>(), active = d.active.download<int32_t>();
  ASSERT_EQ(off, h.offsets) << what;
  EXPECT_EQ(active, h.active) << what;
  for (size_t e = 0; e + 1 < off.size(); ++e) {
    std::vector<int32_t> a(sorted.begin() + off[e], sorted.begin() + off[e + 1]);
    std::sort(a.begin(), a.end());
    EXPECT_EQ(a, std::vector<int32_t>(h.sorted.begin() + off[e], h.sorted.begin() + off[e + 1])) << what << " expert " << e;
  }
  for (size_t r = 0; r < sorted.size(); ++r) ASSERT_EQ(rows[static_cast<size_t>(sorted[r])], static_cast<int32_t>(r)) << what;
}

}  // namespace nanovllm::cuda_moe_test
