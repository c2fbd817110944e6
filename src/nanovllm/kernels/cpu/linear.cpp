// out = in @ weight^T + bias, fp32 accumulation. The hot spot of the CPU backend:
// - weight rows are taken 4 at a time (converted to fp32 into per-thread scratch unless already fp32),
// - a 2-token x 4-row register tile accumulates 8-wide vectors along K (GCC vector extensions, so the
//   code is vectorised without -ffast-math; lanes are summed in a fixed order at the end),
// - threads split the output rows (N), so each converts only its own weight rows,
// - the block routine is compiled for AVX2 and baseline x86-64 and picked at load time (target_clones).
#include <algorithm>
#include <cstring>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cpu/row_io.h"

// V8 values never cross a non-inlined call boundary, so the AVX-vs-SSE argument ABI note does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace nanovllm::cpu {
namespace {

typedef float V8 __attribute__((vector_size(32)));

inline __attribute__((always_inline)) V8 load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline __attribute__((always_inline)) float hsum(V8 v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

constexpr int kRows = 4;  // weight rows per register tile

// res[i][j] = dot(x_i, w_j) for TT token rows x_i and the 4 weight rows w (row stride K).
template <int TT>
inline __attribute__((always_inline)) void tile(const float* const* x, const float* w, int64_t K,
                                                float (&res)[2][kRows]) {
  V8 acc[TT][kRows] = {};
  const float* w0 = w;
  const float* w1 = w + K;
  const float* w2 = w + 2 * K;
  const float* w3 = w + 3 * K;
  const int64_t k8 = K & ~int64_t{7};
  for (int64_t k = 0; k < k8; k += 8) {
    const V8 b0 = load8(w0 + k), b1 = load8(w1 + k), b2 = load8(w2 + k), b3 = load8(w3 + k);
    for (int i = 0; i < TT; ++i) {
      const V8 a = load8(x[i] + k);
      acc[i][0] += a * b0;
      acc[i][1] += a * b1;
      acc[i][2] += a * b2;
      acc[i][3] += a * b3;
    }
  }
  for (int i = 0; i < TT; ++i) {
    for (int j = 0; j < kRows; ++j) {
      float s = hsum(acc[i][j]);
      const float* wj = w + j * K;
      for (int64_t k = k8; k < K; ++k) s += x[i][k] * wj[k];
      res[i][j] = s;
    }
  }
}

struct LinearArgs {
  const float* x;     // [T, K] f32
  int64_t T, K, N;
  const void* w;      // [N, K]
  DType w_dtype;
  const float* bias;  // [N] f32 or nullptr
  void* out;          // [T, N]
  DType out_dtype;
};

// Output rows [g0 * 4, min(N, g1 * 4)).
__attribute__((target_clones("avx2", "default")))
void linear_groups(const LinearArgs& a, int64_t g0, int64_t g1) {
  thread_local std::vector<float> wbuf;
  const int64_t K = a.K, N = a.N, T = a.T;
  float* wscratch = scratch_f32(wbuf, kRows * K);  // [4, K]
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t n0 = g * kRows;
    const int64_t rows = std::min<int64_t>(kRows, N - n0);
    const float* w;
    if (a.w_dtype == DType::kF32 && rows == kRows) {
      w = static_cast<const float*>(a.w) + n0 * K;
    } else {
      load_row_f32(a.w, a.w_dtype, n0 * K, rows * K, wscratch);
      std::fill(wscratch + rows * K, wscratch + kRows * K, 0.0f);  // zero rows pad a short group
      w = wscratch;
    }
    float bias[kRows] = {};
    if (a.bias) std::copy(a.bias + n0, a.bias + n0 + rows, bias);
    float res[2][kRows];
    for (int64_t t = 0; t < T; t += 2) {
      const int tt = T - t >= 2 ? 2 : 1;
      const float* xs[2] = {a.x + t * K, a.x + (t + tt - 1) * K};
      if (tt == 2) tile<2>(xs, w, K, res); else tile<1>(xs, w, K, res);
      for (int i = 0; i < tt; ++i) {
        for (int j = 0; j < rows; ++j) res[i][j] += bias[j];
        store_row_f32(res[i], rows, a.out, a.out_dtype, (t + i) * N + n0);
      }
    }
  }
}

}  // namespace

void linear(TensorView out, TensorView in, TensorView weight, TensorView bias) {
  const int64_t T = in.dim(0), K = in.dim(1), N = weight.dim(0);
  if (T == 0 || N == 0) return;
  // Activations and bias as fp32 once (no-ops for F32 inputs).
  thread_local std::vector<float> xbuf, bbuf;
  const float* x = in.data_as<const float>();
  if (in.dtype() != DType::kF32) {
    float* xs = scratch_f32(xbuf, T * K);  // [T, K]
    load_row_f32(in.data(), in.dtype(), 0, T * K, xs);
    x = xs;
  }
  const float* b = nullptr;
  if (bias.defined() && bias.numel() > 0) {
    if (bias.dtype() == DType::kF32) {
      b = bias.data_as<const float>();
    } else {
      float* bs = scratch_f32(bbuf, N);  // [N]
      load_row_f32(bias.data(), bias.dtype(), 0, N, bs);
      b = bs;
    }
  }
  const LinearArgs args{x, T, K, N, weight.data(), weight.dtype(), b, out.data(), out.dtype()};
  const int64_t groups = (N + kRows - 1) / kRows;
  // Enough work per chunk to amortise the hand-off: ~64K multiply-adds.
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, T * K * kRows));
  parallel_for(groups, [&](int64_t g0, int64_t g1) { linear_groups(args, g0, g1); }, grain);
}

}  // namespace nanovllm::cpu
