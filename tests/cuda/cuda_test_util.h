// Helpers for the CUDA op tests: device buffers filled from host vectors, random bf16 data (with the
// exact fp32 values for the CPU reference), and comparisons that report the first bad element.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "nanovllm/core/dtype.h"
#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cuda/cuda_memory.h"
#include "nanovllm/kernels/cuda/device_context.h"
#include "nanovllm/kernels/ops.h"

#define SKIP_WITHOUT_CUDA()                                                   \
  do {                                                                        \
    int n_dev_ = 0;                                                           \
    if (cudaGetDeviceCount(&n_dev_) != cudaSuccess || n_dev_ == 0) {          \
      (void)cudaGetLastError();                                               \
      GTEST_SKIP() << "no CUDA device";                                       \
    }                                                                         \
  } while (0)

namespace nanovllm::cuda_test {

// The test process's kernel context for device 0, what a runner owns in the engine (made at first use;
// never destroyed, so no CUDA call runs during static destruction).
inline cuda_ops::DeviceContext& context() {
  static cuda_ops::DeviceContext* ctx = new cuda_ops::DeviceContext(0);
  return *ctx;
}

// A CUDA op's execution context: stream `st` (nullptr: the legacy default stream) with context().
inline ops::Stream on(cudaStream_t st = nullptr) { return ops::Stream{st, &context()}; }

// Restores context()'s kernel options when it goes out of scope (a test that changes them derives from it).
struct RestoreOptions {
  cuda_ops::KernelOptions saved = context().options;
  RestoreOptions() = default;
  RestoreOptions(const RestoreOptions&) = delete;
  RestoreOptions& operator=(const RestoreOptions&) = delete;
  ~RestoreOptions() { context().options = saved; }
};

// Compute capability major of device 0 (tests of sm_90-only paths skip below 9).
inline int device_major() {
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  return major;
}

// Times `reps` calls of `fn` (which enqueues work on `st`), one event pair each: the times in ms, sorted
// (median at [size / 2]). Benchmarks only.
template <class F>
std::vector<float> time_each_ms(cudaStream_t st, int reps, F&& fn) {
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(e0, st));
    fn();
    CUDA_CHECK(cudaEventRecord(e1, st));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  CUDA_CHECK(cudaEventDestroy(e0));
  CUDA_CHECK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return ms;
}

// Runs `body` (which enqueues work on `st`) once eagerly, so one-time choices and workspaces happen
// outside the capture, then captures it into a graph: the instantiated graph.
template <class F>
cudaGraphExec_t warm_up_and_capture(cudaStream_t st, F&& body) {
  body();
  CUDA_CHECK(cudaStreamSynchronize(st));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  body();
  CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
  return exec;
}

// time_each_ms of replays of a captured graph.
inline std::vector<float> graph_replay_ms(cudaGraphExec_t exec, cudaStream_t st, int reps) {
  return time_each_ms(st, reps, [&] { CUDA_CHECK(cudaGraphLaunch(exec, st)); });
}

// The median replay, in microseconds, of `body` captured into a graph on `st` (warm_up_and_capture), over `reps` replays.
template <class F>
double graph_median_us(cudaStream_t st, F&& body, int reps = 21) {
  cudaGraphExec_t g = warm_up_and_capture(st, body);
  const std::vector<float> ms = graph_replay_ms(g, st, reps);
  CUDA_CHECK(cudaGraphExecDestroy(g));
  return 1000.0 * ms[ms.size() / 2];
}

// bf16 bit patterns as their exact fp32 values.
inline std::vector<float> bf16_bits_to_f32(const std::vector<uint16_t>& bits) {
  std::vector<float> f(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) f[i] = bf16_to_f32(bits[i]);
  return f;
}

// Random bf16 values in [lo, hi) that are never exactly zero; `f32` gets their exact fp32 values.
struct Bf16Data {
  std::vector<uint16_t> bits;
  std::vector<float> f32;
};
inline Bf16Data random_bf16(size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  Bf16Data d;
  d.bits.resize(n);
  d.f32.resize(n);
  for (size_t i = 0; i < n; ++i) {
    float v = dist(rng);
    if (v == 0.0f) v = 0.5f * hi;
    d.bits[i] = f32_to_bf16(v);
    d.f32[i] = bf16_to_f32(d.bits[i]);
  }
  return d;
}

// A device buffer with a typed view.
class DeviceTensor {
 public:
  DeviceTensor(DType dt, Shape shape) : buf_(cuda_allocator(0), dt, shape) {}
  template <typename T>
  DeviceTensor(DType dt, Shape shape, const std::vector<T>& host) : DeviceTensor(dt, shape) {
    EXPECT_EQ(host.size() * sizeof(T), buf_.nbytes());
    CUDA_CHECK(cudaMemcpy(buf_.data(), host.data(), buf_.nbytes(), cudaMemcpyHostToDevice));
  }
  TensorView view() const { return buf_.view(); }
  void fill_bytes(int byte) { CUDA_CHECK(cudaMemset(buf_.data(), byte, buf_.nbytes())); }
  template <typename T> std::vector<T> download() const {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(buf_.nbytes() / sizeof(T));
    CUDA_CHECK(cudaMemcpy(h.data(), buf_.data(), buf_.nbytes(), cudaMemcpyDeviceToHost));
    return h;
  }
  // Element values as fp32 whatever the dtype.
  std::vector<float> download_f32() const {
    const std::vector<uint8_t> raw = download<uint8_t>();
    const size_t n = static_cast<size_t>(buf_.view().numel());
    std::vector<float> f(n);
    for (size_t i = 0; i < n; ++i) f[i] = load_as_f32(raw.data(), buf_.view().dtype(), i);
    return f;
  }

 private:
  Buffer buf_;
};

inline TensorView host_view(std::vector<float>& v, Shape s) { return TensorView(v.data(), DType::kF32, s); }
inline TensorView host_view(std::vector<int32_t>& v, Shape s) { return TensorView(v.data(), DType::kI32, s); }

// Every element: |got - ref| <= atol + rtol |ref|, and no NaN (outputs are NaN-poisoned beforehand).
inline void expect_close(const std::vector<float>& got, const std::vector<float>& ref, float atol, float rtol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isfinite(got[i]) && std::fabs(got[i] - ref[i]) <= atol + rtol * std::fabs(ref[i]);
    if (!ok && bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements off; first at " << first
                     << ": got " << got[first] << " want " << ref[first];
}

// Normalised mean squared error sum (got - ref)^2 / sum ref^2 (NaN-safe: NaN fails).
inline double nmse(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  const double r = num / (den > 0 ? den : 1.0);
  return std::isfinite(r) ? r : 1e30;
}

// out[T, N] = x[T, K] @ w[N, K]^T by the CPU reference linear.
inline std::vector<float> linear_reference(const std::vector<float>& x, const std::vector<float>& w, int64_t T,
                                           int64_t N, int64_t K) {
  std::vector<float> ref(static_cast<size_t>(T * N));
  cpu::linear(TensorView(ref.data(), DType::kF32, {T, N}),
              TensorView(const_cast<float*>(x.data()), DType::kF32, {T, K}),
              TensorView(const_cast<float*>(w.data()), DType::kF32, {N, K}), TensorView());
  return ref;
}

}  // namespace nanovllm::cuda_test
