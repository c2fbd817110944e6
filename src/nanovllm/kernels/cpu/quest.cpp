// Quest page metadata (per block and KV head: element-wise key min/max) and page scores.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_sparse_ops.h"
#include "nanovllm/kernels/cpu/dual_chunk_row.h"
#include "nanovllm/kernels/cpu/kv_row.h"
#include "nanovllm/kernels/cpu/row_io.h"

namespace nanovllm::cpu {

namespace {

// x rounded to BF16 toward -inf (down) or +inf (up): the nearest-even rounding, stepped one code outward when
// it went the other way.
uint16_t bf16_outward(float x, bool down) {
  uint16_t b = f32_to_bf16(x);
  const float r = bf16_to_f32(b);
  if (std::isnan(x) || (down ? r <= x : r >= x)) return b;
  const bool negative = (b & 0x8000u) != 0;
  if ((b & 0x7fffu) == 0) return down ? uint16_t{0x8001u} : uint16_t{0x0001u};  // +-0 -> the smallest subnormal
  return static_cast<uint16_t>(down != negative ? b - 1 : b + 1);  // magnitude - 1 (toward 0) or + 1
}

// The page bound's metadata row: the dtype's exact values (f32, or a cache of that dtype), or BF16 outward.
void store_bound_row(const float* x, int64_t D, TensorView dst, int64_t first, bool down, bool outward) {
  if (!outward || dst.dtype() != DType::kBF16) {
    store_row_f32(x, D, dst.data(), dst.dtype(), first);
    return;
  }
  uint16_t* d = dst.data_as<uint16_t>() + first;
  for (int64_t i = 0; i < D; ++i) d[i] = bf16_outward(x[i], down);
}

}  // namespace

void quest_update_pages(TensorView k_min, TensorView k_max, const KvCacheTensor& k_cache, TensorView slot_mapping) {
  const int64_t T = slot_mapping.dim(0), Hk = k_cache.dim(2), D = k_cache.dim(3), BS = k_cache.dim(1);
  const int32_t* sm = slot_mapping.data_as<const int32_t>();
  const DType dt = k_min.dtype();
  // An fp8 cache's dequantized keys need not be values of the metadata's dtype: round outward.
  const bool outward = k_cache.fp8();
  // Tokens in order (a block's offset-0 token resets it before its later tokens fold in); heads in
  // parallel. min and max of values of the cache's dtype are values of that dtype: the stores are exact.
  parallel_for(Hk, [&](int64_t b, int64_t e) {
    std::vector<float> key(static_cast<size_t>(D)), lo(static_cast<size_t>(D)), hi(static_cast<size_t>(D));
    for (int64_t h = b; h < e; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        if (sm[t] < 0) continue;
        const int64_t block = sm[t] / BS, offset = sm[t] % BS;
        const int64_t meta = (block * Hk + h) * D;
        load_kv_row(k_cache, int64_t{sm[t]} * Hk + h, key.data());
        if (offset == 0) {
          lo = key;
          hi = key;
        } else {
          load_row_f32(k_min.data(), dt, meta, D, lo.data());
          load_row_f32(k_max.data(), dt, meta, D, hi.data());
          for (int64_t d = 0; d < D; ++d) {
            lo[static_cast<size_t>(d)] = std::min(lo[static_cast<size_t>(d)], key[static_cast<size_t>(d)]);
            hi[static_cast<size_t>(d)] = std::max(hi[static_cast<size_t>(d)], key[static_cast<size_t>(d)]);
          }
        }
        store_bound_row(lo.data(), D, k_min, meta, /*down=*/true, outward);
        store_bound_row(hi.data(), D, k_max, meta, /*down=*/false, outward);
      }
    }
  });
}

void quest_scores(TensorView scores, TensorView q, TensorView k_min, TensorView k_max, TensorView block_tables,
                  TensorView context_lens, int64_t block_size, const ops::DualChunkParams* dca) {
  const int64_t R = dca ? 3 : 1;  // query rotations: q [S, Hq, D], or [3, S, Hq, D] with DCA
  const int64_t S = q.dim(q.ndim() - 3), Hq = q.dim(q.ndim() - 2), D = q.dim(q.ndim() - 1);
  const int64_t Hk = k_min.dim(1), G = Hq / Hk;
  const int64_t MP = scores.dim(2), MB = block_tables.dim(1);
  const int32_t* ctx = context_lens.data_as<const int32_t>();
  const int32_t* bt = block_tables.data_as<const int32_t>();
  float* out = scores.data_as<float>();
  parallel_for(S * Hk, [&](int64_t b, int64_t e) {
    std::vector<float> qg(static_cast<size_t>(R * G * D)), lo(static_cast<size_t>(D)), hi(static_cast<size_t>(D));
    for (int64_t item = b; item < e; ++item) {
      const int64_t s = item / Hk, h = item % Hk;
      const int64_t pages = (int64_t{ctx[s]} + block_size - 1) / block_size;
      for (int64_t r = 0; r < R; ++r)
        load_row_f32(q.data(), q.dtype(), ((r * S + s) * Hq + h * G) * D, G * D, qg.data() + r * G * D);
      const int64_t p_query = int64_t{ctx[s]} - 1;  // DCA: the decode query's position
      float* row = out + item * MP;
      for (int64_t p = 0; p < MP; ++p) {
        if (p >= pages) {
          row[p] = -std::numeric_limits<float>::infinity();
          continue;
        }
        const int64_t meta = (int64_t{bt[s * MB + p]} * Hk + h) * D;
        load_row_f32(k_min.data(), k_min.dtype(), meta, D, lo.data());
        load_row_f32(k_max.data(), k_max.dtype(), meta, D, hi.data());
        // Per query head the bound in double (no rounding below the true maximum), then the group's max. With DCA
        // a key is scored with its region's rotation, so the bound of the page is the max over the regions its
        // positions [p BS, (p + 1) BS) meet, each with that region's rotation.
        // Regions grow inward with the position (inter, successive, intra): the page meets those between the
        // regions of its first and its last position.
        bool region_met[3] = {R == 1, false, false};
        if (dca) {
          const int64_t last = std::min<int64_t>((p + 1) * block_size, ctx[s]) - 1;
          for (int r = dual_chunk_region(p_query, last, dca->chunk_len);
               r <= dual_chunk_region(p_query, p * block_size, dca->chunk_len); ++r)
            region_met[r] = true;
        }
        double best = -std::numeric_limits<double>::infinity();
        for (int64_t rg = 0; rg < R * G; ++rg) {
          if (!region_met[rg / G]) continue;
          const float* qv = qg.data() + rg * D;
          double bound = 0.0;
          for (int64_t d = 0; d < D; ++d) {
            const double a = double{qv[d]} * lo[static_cast<size_t>(d)];
            const double c = double{qv[d]} * hi[static_cast<size_t>(d)];
            bound += std::max(a, c);
          }
          best = std::max(best, bound);
        }
        row[p] = static_cast<float>(best);
      }
    }
  });
}

}  // namespace nanovllm::cpu
