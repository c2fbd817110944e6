// CPU reference of the page cache ops (contracts: kernels/page_cache_ops.h).
#include <algorithm>
#include <cstring>

#include "nanovllm/kernels/cpu/cpu_page_cache.h"

namespace nanovllm::cpu {

void page_cache_reset(const ops::PageCacheState& st, TensorView counters) {
  if (counters.data() != nullptr) std::fill_n(counters.data_as<int64_t>(), 2, int64_t{0});
  std::fill_n(st.page_slot.data_as<int32_t>(), st.page_slot.numel(), -1);
  std::fill_n(st.slot_page.data_as<int32_t>(), st.slot_page.numel(), -1);
  std::fill_n(st.slot_stamp.data_as<int32_t>(), st.slot_stamp.numel(), -1);
  std::fill_n(st.hand.data_as<int32_t>(), st.hand.numel(), 0);
}

void page_cache_store_scales(TensorView dst, TensorView src, int64_t start) {
  const int64_t T = src.dim(0), Hk = src.dim(1), cap = dst.dim(1);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hk; ++h) dst.data_as<float>()[h * cap + start + t] = src.data_as<const float>()[t * Hk + h];
}

void page_cache_plan_rows(TensorView plan, TensorView selected, const ops::PageCacheState& st,
                          std::span<const ops::PageCacheRow> rows, int64_t page_size, int32_t step,
                          TensorView counters) {
  const int64_t Hk = st.page_slot.dim(1), P = st.page_slot.dim(2), C = st.slot_page.dim(2), K = selected.dim(2);
  int64_t* count = counters.data_as<int64_t>();
  for (size_t b = 0; b < rows.size(); ++b) {
    const int64_t lane = rows[b].lane, host_tokens = rows[b].host_tokens;
    for (int64_t h = 0; h < Hk; ++h) {
      const int64_t lh = lane * Hk + h;  // the lane's head h in the stacked state
      const int32_t* sel = selected.data_as<const int32_t>() + (static_cast<int64_t>(b) * Hk + h) * K;
      int32_t* out = plan.data_as<int32_t>() + (static_cast<int64_t>(b) * Hk + h) * K * 2;
      int32_t* page_slot = st.page_slot.data_as<int32_t>() + lh * P;
      int32_t* slot_page = st.slot_page.data_as<int32_t>() + lh * C;
      int32_t* stamp = st.slot_stamp.data_as<int32_t>() + lh * C;
      int32_t& hand = st.hand.data_as<int32_t>()[lh];
      // Hits first, so that no miss of this step evicts a page this step uses.
      for (int64_t k = 0; k < K; ++k) {
        const int64_t p = sel[k];
        out[2 * k] = -1, out[2 * k + 1] = 0;
        if (p < 0 || p * page_size >= host_tokens) continue;  // nothing in the host pool
        out[2 * k + 1] = 1;                                   // from the host unless a hit below
        if ((p + 1) * page_size > host_tokens) continue;      // the straddling page: uncached
        const int32_t c = page_slot[p];
        if (c < 0) continue;
        out[2 * k] = c, out[2 * k + 1] = 0;
        stamp[c] = step;
        ++count[0];
      }
      for (int64_t k = 0; k < K; ++k) {
        const int64_t p = sel[k];
        if (p < 0 || (p + 1) * page_size > host_tokens || out[2 * k + 1] == 0) continue;
        ++count[1];
        if (C == 0) continue;  // no cache: the page comes from the host uncached
        int32_t c = hand;
        while (stamp[c] == step) c = static_cast<int32_t>((c + 1) % C);  // C >= K: a free slot exists
        if (slot_page[c] >= 0) page_slot[slot_page[c]] = -1;
        slot_page[c] = static_cast<int32_t>(p), page_slot[p] = c, stamp[c] = step;
        hand = static_cast<int32_t>((c + 1) % C);
        out[2 * k] = c;
      }
    }
  }
}

void page_cache_fetch_rows(const KvCacheTensor& dst_k, const KvCacheTensor& dst_v,
                           std::span<const KvCacheTensor> host_k, std::span<const KvCacheTensor> host_v,
                           const KvCacheTensor& cache_k, const KvCacheTensor& cache_v, TensorView selected,
                           TensorView plan, std::span<const ops::PageCacheRow> rows) {
  const int64_t N = dst_k.dim(1), Hk = dst_k.dim(2), K = selected.dim(2), C = cache_k.dim(1), ps = cache_k.dim(2);
  const size_t row = static_cast<size_t>(dst_k.dim(3)) * dtype_size(dst_k.dtype());  // one head's D elements
  // Byte address of (token t, head h) in a [*, Hk, D] tensor (the cache as [lanes x C x ps, Hk, D]).
  const auto at = [&](const TensorView& t, int64_t tok, int64_t h) {
    return static_cast<char*>(t.data()) + static_cast<size_t>(tok * Hk + h) * row;
  };
  // One row: its D elements and, in an fp8 cache, its scale (the host pool's head-major: [Hk, capacity]).
  const auto copy_row = [&](const KvCacheTensor& to, int64_t to_tok, const KvCacheTensor& from, int64_t from_tok,
                            int64_t h, bool from_pool = false) {
    std::memcpy(at(to, to_tok, h), at(from, from_tok, h), row);
    if (!to.fp8()) return;
    const int64_t from_at = from_pool ? h * from.scale.dim(1) + from_tok : from_tok * Hk + h;
    to.scale.data_as<float>()[to_tok * Hk + h] = from.scale.data_as<const float>()[from_at];
  };
  for (size_t b = 0; b < rows.size(); ++b) {
    const int64_t lane = rows[b].lane, host_tokens = rows[b].host_tokens;
    const int32_t* sel = selected.data_as<const int32_t>() + static_cast<int64_t>(b) * Hk * K;
    const int32_t* pl = plan.data_as<const int32_t>() + static_cast<int64_t>(b) * Hk * K * 2;
    for (int64_t h = 0; h < Hk; ++h)
      for (int64_t k = 0; k < K; ++k) {
        const int64_t i = h * K + k, p = sel[i], slot = pl[2 * i];
        const bool from_host = pl[2 * i + 1] != 0;
        if (p < 0 || (!from_host && slot < 0)) continue;
        for (int64_t r = p * ps; r < std::min((p + 1) * ps, host_tokens); ++r) {
          const int64_t dst_tok = lane * N + r, cache_tok = (lane * C + slot) * ps + (r - p * ps);
          for (int kv = 0; kv < 2; ++kv) {
            const KvCacheTensor& dst = kv ? dst_v : dst_k;
            const KvCacheTensor& cache = kv ? cache_v : cache_k;
            if (from_host) {
              copy_row(dst, dst_tok, (kv ? host_v : host_k)[b], r, h, true);
              if (slot >= 0) copy_row(cache, cache_tok, dst, dst_tok, h);
            } else {
              copy_row(dst, dst_tok, cache, cache_tok, h);
            }
          }
        }
      }
  }
}

}  // namespace nanovllm::cpu
