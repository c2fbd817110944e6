// Dual Chunk Attention on the CPU (kernels/dual_chunk_ops.h), computed the way vLLM's backend does
// (DualChunkFlashAttentionImpl._dual_chunk_flash_attn_prefill_func / _dual_chunk_flash_attn_decoding): per
// query row and KV head up to three partial attentions, each with its own query rotation over its own key
// range, each giving an output and a log-sum-exp, then merged by the log-sum-exps (_merge_attn_outputs).
// fp32 scores, fp64 softmax sums.
#include <algorithm>
#include <cmath>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/attention_row.h"
#include "nanovllm/kernels/cpu/cpu_dual_chunk_ops.h"
#include "nanovllm/kernels/cpu/row_io.h"

namespace nanovllm::cpu {
namespace {

// One partial attention: out[g, :] = softmax_j(q[g] . k_j * scale) v_j over keys j in [begin, end) (cache slots
// slot_of(j)) and lse[g] = log sum_j exp(q[g] . k_j * scale), for the G query heads of KV head kvh.
// q, out [G, D]; scores: [G, end - begin] scratch.
template <typename SlotOf>
void attend_range(const float* q, int64_t G, int64_t kvh, int64_t begin, int64_t end, SlotOf slot_of,
                  const TensorView& k_cache, const TensorView& v_cache, float scale, float* kv_row, float* scores,
                  float* out, double* lse) {
  const int64_t Hk = k_cache.dim(2), D = k_cache.dim(3), n = end - begin;
  for (int64_t j = 0; j < n; ++j) {
    load_row_f32(k_cache.data(), k_cache.dtype(), (int64_t{slot_of(begin + j)} * Hk + kvh) * D, D, kv_row);
    for (int64_t g = 0; g < G; ++g) scores[g * n + j] = dot_f32(q + g * D, kv_row, D) * scale;
  }
  for (int64_t g = 0; g < G; ++g) {
    float* sc = scores + g * n;
    const float m = *std::max_element(sc, sc + n);
    double denom = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      const double w = std::exp(static_cast<double>(sc[j]) - m);
      sc[j] = static_cast<float>(w);
      denom += w;
    }
    lse[g] = m + std::log(denom);
    const float inv = static_cast<float>(1.0 / denom);
    for (int64_t j = 0; j < n; ++j) sc[j] *= inv;
  }
  std::fill(out, out + G * D, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    load_row_f32(v_cache.data(), v_cache.dtype(), (int64_t{slot_of(begin + j)} * Hk + kvh) * D, D, kv_row);
    for (int64_t g = 0; g < G; ++g) {
      const float w = scores[g * n + j];
      float* o = out + g * D;
      for (int64_t d = 0; d < D; ++d) o[d] += w * kv_row[d];
    }
  }
}

}  // namespace

void dual_chunk_attention(TensorView out, TensorView q, TensorView k_cache, TensorView v_cache,
                          const AttentionMetadata& meta, const ops::DualChunkParams& dca, float scale) {
  const int64_t T = q.dim(1), Hq = q.dim(2), D = q.dim(3);
  const int64_t BS = k_cache.dim(1), Hk = k_cache.dim(2);
  const int64_t G = Hq / Hk;  // query heads per KV head
  const int64_t S = meta.num_seqs, L = dca.chunk_len;
  const int64_t max_blocks = meta.block_tables.dim(1);
  const int32_t* cu = meta.cu_seqlens_q.data_as<const int32_t>();   // [S + 1]
  const int32_t* ctx = meta.context_lens.data_as<const int32_t>();  // [S]
  const int32_t* bt = meta.block_tables.data_as<const int32_t>();   // [S, max_blocks]
  std::vector<int32_t> seq_of(static_cast<size_t>(T));              // [T] row -> sequence
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = cu[s]; t < cu[s + 1]; ++t) seq_of[static_cast<size_t>(t)] = static_cast<int32_t>(s);

  parallel_for(T * Hk, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf, score_buf;
    thread_local std::vector<double> lse_buf;
    float* qrows = scratch_f32(buf, 6 * G * D + D);  // [3, G, D] queries, [3, G, D] partial outputs, [D] K/V row
    float* parts = qrows + 3 * G * D;
    float* kv_row = parts + 3 * G * D;
    if (lse_buf.size() < static_cast<size_t>(3 * G)) lse_buf.resize(static_cast<size_t>(3 * G));
    double* lse = lse_buf.data();  // [3, G]
    for (int64_t item = b; item < e; ++item) {
      const int64_t t = item / Hk, kvh = item % Hk;
      const int64_t s = seq_of[static_cast<size_t>(t)];
      const int64_t p = int64_t{ctx[s]} - (int64_t{cu[s + 1]} - t);  // absolute position of row t
      const int32_t* table = bt + s * max_blocks;
      auto slot_of = [&](int64_t j) { return int64_t{table[j / BS]} * BS + j % BS; };
      // The key ranges of the three rotations: own chunk [c L, p], previous [(c-1) L, c L), earlier [0, (c-1) L).
      const int64_t c = p / L;
      const int64_t begin[3] = {c * L, std::max<int64_t>(c - 1, 0) * L, 0};
      const int64_t end[3] = {p + 1, c * L, std::max<int64_t>(c - 1, 0) * L};
      int parts_used = 0;
      int used[3];
      for (int r = 0; r < 3; ++r) {
        if (end[r] <= begin[r]) continue;
        float* qr = qrows + r * G * D;
        load_row_f32(q.data(), q.dtype(), ((r * T + t) * Hq + kvh * G) * D, G * D, qr);
        float* scores = scratch_f32(score_buf, G * (end[r] - begin[r]));  // [G, keys]
        attend_range(qr, G, kvh, begin[r], end[r], slot_of, k_cache, v_cache, scale, kv_row, scores,
                     parts + r * G * D, lse + r * G);
        used[parts_used++] = r;
      }
      // Merge: weights exp(lse_r - max) / sum (the intra part always exists: it holds key p).
      for (int64_t g = 0; g < G; ++g) {
        double mx = -INFINITY;
        for (int i = 0; i < parts_used; ++i) mx = std::max(mx, lse[used[i] * G + g]);
        double w[3], wsum = 0.0;
        for (int i = 0; i < parts_used; ++i) wsum += (w[i] = std::exp(lse[used[i] * G + g] - mx));
        float* o = qrows + g * D;  // the intra query is no longer needed: the merged output goes there
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0.0;
          for (int i = 0; i < parts_used; ++i) acc += w[i] * parts[(used[i] * G + g) * D + d];
          o[d] = static_cast<float>(acc / wsum);
        }
      }
      store_row_f32(qrows, G * D, out.data(), out.dtype(), (t * Hq + kvh * G) * D);
    }
  }, 1);
}

}  // namespace nanovllm::cpu
