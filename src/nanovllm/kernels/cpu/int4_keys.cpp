// The keyscore decode policy's 4-bit key copy and its page scores (contracts: kernels/sparse_ops.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_sparse_ops.h"
#include "nanovllm/kernels/cpu/kv_row.h"
#include "nanovllm/kernels/cpu/row_io.h"

namespace nanovllm::cpu {

void int4_keys_update(TensorView codes, TensorView scales, const KvCacheTensor& k_cache, TensorView slot_mapping) {
  const int64_t T = slot_mapping.dim(0), BS = k_cache.dim(1), Hk = k_cache.dim(2), D = k_cache.dim(3);
  const int32_t* sm = slot_mapping.data_as<const int32_t>();
  uint8_t* out_codes = codes.data_as<uint8_t>();
  float* out_scales = scales.data_as<float>();
  // Rows are independent (one writer per slot and head): tokens in parallel.
  parallel_for(T, [&](int64_t b, int64_t e) {
    std::vector<float> key(static_cast<size_t>(D));
    for (int64_t t = b; t < e; ++t) {
      if (sm[t] < 0) continue;
      const int64_t block = sm[t] / BS, offset = sm[t] % BS;
      for (int64_t h = 0; h < Hk; ++h) {
        load_kv_row(k_cache, int64_t{sm[t]} * Hk + h, key.data());
        float amax = 0.0f;
        for (const float x : key) amax = std::max(amax, std::fabs(x));
        const float scale = amax > 0.0f ? amax / 7.0f : 1.0f;
        const int64_t row = (block * Hk + h) * BS + offset;
        uint8_t* dst = out_codes + row * (D / 2);
        for (int64_t d = 0; d < D; d += 2) {
          const auto nibble = [&](int64_t i) {
            const float c = std::nearbyint(key[static_cast<size_t>(i)] / scale);  // round half to even
            return static_cast<uint8_t>(std::clamp(c, -7.0f, 7.0f) + 8.0f);
          };
          dst[d / 2] = static_cast<uint8_t>(nibble(d) | (nibble(d + 1) << 4));
        }
        out_scales[row] = scale;
      }
    }
  });
}

void int4_key_scores(TensorView scores, TensorView q, TensorView codes, TensorView scales, TensorView block_tables,
                     TensorView context_lens, int64_t block_size) {
  const int64_t S = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hk = codes.dim(1), G = Hq / Hk, BS = block_size;
  const int64_t MP = scores.dim(2), MB = block_tables.dim(1);
  const int32_t* ctx = context_lens.data_as<const int32_t>();
  const int32_t* bt = block_tables.data_as<const int32_t>();
  const uint8_t* all_codes = codes.data_as<const uint8_t>();
  const float* all_scales = scales.data_as<const float>();
  float* out = scores.data_as<float>();
  parallel_for(S * Hk, [&](int64_t b, int64_t e) {
    std::vector<float> qg(static_cast<size_t>(G * D)), k(static_cast<size_t>(D));
    for (int64_t item = b; item < e; ++item) {
      const int64_t s = item / Hk, h = item % Hk;
      const int64_t n = ctx[s], pages = (n + BS - 1) / BS;
      load_row_f32(q.data(), q.dtype(), (s * Hq + h * G) * D, G * D, qg.data());
      float* row = out + item * MP;
      for (int64_t p = 0; p < MP; ++p) {
        float best = -std::numeric_limits<float>::infinity();
        const int64_t keys = p < pages ? std::min(BS, n - p * BS) : 0;
        for (int64_t t = 0; t < keys; ++t) {
          const int64_t r = (int64_t{bt[s * MB + p]} * Hk + h) * BS + t;
          const uint8_t* c = all_codes + r * (D / 2);
          for (int64_t d = 0; d < D; d += 2) {
            k[static_cast<size_t>(d)] = static_cast<float>((c[d / 2] & 15) - 8);
            k[static_cast<size_t>(d + 1)] = static_cast<float>((c[d / 2] >> 4) - 8);
          }
          for (int64_t g = 0; g < G; ++g) {
            const float* qv = qg.data() + g * D;
            float dot = 0.0f;
            for (int64_t d = 0; d < D; ++d) dot += qv[d] * k[static_cast<size_t>(d)];
            best = std::max(best, all_scales[r] * dot);
          }
        }
        row[p] = best;
      }
    }
  });
}

}  // namespace nanovllm::cpu
