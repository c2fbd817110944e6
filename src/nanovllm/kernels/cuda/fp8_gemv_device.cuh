// Device helpers of the fp8 weight-streaming GEMVs (fp8_gemv.cu: register-fed; fp8_gemv_bulk.cu: bulk-copy ring):
// e4m3 codes become f32 with integer ops alone. An e4m3 code's exponent and mantissa bits placed in an f32's give
// its value times 2^-120 exactly, e4m3 subnormals included (they land on f32 subnormals, which the FMAs keep: no
// flush to zero in this build). The 2^120 goes back in with the block scale. (NaN codes, which no quantizer
// writes, would read as 480.)
#pragma once

#include <cstdint>

namespace nanovllm::cuda_ops::fp8_gemv_detail {

constexpr float kTwoPow120 = 0x1p120f;

// Four e4m3 codes (one word, code i in byte i) as f32 values times 2^-120: sign to bit 31, the 7 exponent and
// mantissa bits to bits 26..20 (an arithmetic shift by 4 puts them there and the mask drops the sign copies).
__device__ __forceinline__ void e4m3x4_times_2pow_minus120(uint32_t v, float* f) {
  constexpr uint32_t kMask = 0x87f00000u;
  f[0] = __uint_as_float(static_cast<uint32_t>(static_cast<int32_t>(v << 24) >> 4) & kMask);
  f[1] = __uint_as_float(static_cast<uint32_t>(static_cast<int32_t>(v << 16) >> 4) & kMask);
  f[2] = __uint_as_float(static_cast<uint32_t>(static_cast<int32_t>(v << 8) >> 4) & kMask);
  f[3] = __uint_as_float(static_cast<uint32_t>(static_cast<int32_t>(v) >> 4) & kMask);
}

// Four e4m3 codes (code i in byte i) as two bf16x2 words (codes 0, 1 and codes 2, 3; the lower code in the low
// half) holding their values times 2^-120 exactly: a bf16 is an f32's top half, so the trick above 16 bits lower
// (e4m3 subnormals become bf16 subnormals). Two byte permutes put the codes in the words' high bytes, a shift by 4
// moves exponent and mantissa into place, the masks keep them and the sign.
__device__ __forceinline__ uint2 e4m3x4_as_bf16x4_times_2pow_minus120(uint32_t v) {
  const uint32_t a = __byte_perm(v, 0, 0x1404), b = __byte_perm(v, 0, 0x3424);  // bytes [0, c0, 0, c1], [0, c2, 0, c3]
  return make_uint2((a & 0x80008000u) | ((a >> 4) & 0x07f007f0u), (b & 0x80008000u) | ((b >> 4) & 0x07f007f0u));
}

// Eight bf16 (one 16-byte vector) as f32: a bf16 is the top half of an f32.
__device__ __forceinline__ void bf16x8_as_f32(const uint4& v, float* f) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// acc[t] += (16 codes . xs[t]) * 2^120 * scale for each token t: the 16 codes (one 16-byte vector, all in one
// 128-column block of scale `scale`) summed in fp32 in k order, then scaled (2^120 first: the product cannot
// overflow) and added: the same order in both kernels.
template <int kT>
__device__ __forceinline__ void fp8x16_dot_add(const uint4& codes, const float (&xs)[kT][16], float scale,
                                               float (&acc)[kT]) {
  float ws[16];
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) e4m3x4_times_2pow_minus120(words[i], ws + 4 * i);
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) sum = fmaf(ws[i], xs[t][i], sum);
    acc[t] = fmaf(sum * kTwoPow120, scale, acc[t]);
  }
}

// xs[t] = the 16 bf16 of x row min(t, T - 1) at column k, as f32 (tokens past T reread row T - 1 and are not
// stored). x [T, K] bf16, k a multiple of 16.
template <int kT>
__device__ __forceinline__ void load_x16(const uint16_t* __restrict__ x, int T, int K, int k, float (&xs)[kT][16]) {
#pragma unroll
  for (int t = 0; t < kT; ++t) {
    const uint4* row = reinterpret_cast<const uint4*>(x + int64_t{min(t, T - 1)} * K + k);
    bf16x8_as_f32(__ldg(row), xs[t]);
    bf16x8_as_f32(__ldg(row + 1), xs[t] + 8);
  }
}

}  // namespace nanovllm::cuda_ops::fp8_gemv_detail
