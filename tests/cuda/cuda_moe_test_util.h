// Helpers of the CUDA mixture-of-experts tests (test_cuda_moe.cpp, test_cuda_moe_decode.cpp and its benchmark): host
// views, random routings, device and CPU groupings and their comparison, a device workspace.
#pragma once

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "nanovllm/kernels/cpu/cpu_moe_ops.h"
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
