// block_sparse_prefill_attention on CUDA: the sm_90a wgmma prefill kernel with the block-sparse key source
// (attention_prefill_wgmma.cu, block_sparse_tiles.cuh), head_dim 64 / 128, bf16 q and a bf16 or fp8 KV cache (an
// fp8 cache's K / V tiles are dequantized in shared memory as the dense wgmma prefill does). No other path: other
// GPUs and head dims get an error naming what is supported. Dual Chunk Attention (q [3, T, Hq, D]): the same
// kernel with the key stream grouped by region (SparseKeysDca), chunk_len a multiple of its 128-key tiles.
#include "nanovllm/kernels/cuda/block_sparse_tiles.cuh"
#include "nanovllm/kernels/cuda/cuda_sparse_ops.h"

namespace nanovllm::cuda_ops {

void block_sparse_prefill_attention(TensorView out, TensorView q, const KvCacheTensor& k_cache,
                                    const KvCacheTensor& v_cache, const AttentionMetadata& meta,
                                    const ops::BlockSparsePattern& pattern, float scale, const ops::DualChunkParams* dca,
                                    ops::Stream s) {
  constexpr const char* op = "block_sparse_prefill_attention (cuda)";
  // q [T, Hq, D], or [3, T, Hq, D] with DCA
  const int64_t T = q.dim(q.ndim() - 3), Hq = q.dim(q.ndim() - 2), D = q.dim(q.ndim() - 1);
  if (T == 0) return;
  const TensorView q_first(q.data(), q.dtype(), Shape{T, Hq, D}, q.device());  // [T, Hq, D]: the intra rotation
  attn::Params p = attn::attention_params(out, q_first, k_cache, v_cache, meta, scale);
  if (dca != nullptr) {
    NANOVLLM_CHECK(dca->chunk_len % ops::kCudaDualChunkLenMultiple == 0 && dca->chunk_len % pattern.block_size == 0, op,
                   ": Dual Chunk Attention's chunk length ", dca->chunk_len, " must be a multiple of ",
                   ops::kCudaDualChunkLenMultiple, " and of the pattern block size ", pattern.block_size);
    p.q_succ = p.q + T * Hq * D;
    p.q_inter = p.q + 2 * T * Hq * D;
    p.dca_chunk_len = static_cast<int>(dca->chunk_len);
  }
  attn::SparsePattern sp;
  sp.block_counts = pattern.block_counts.data_as<const int32_t>();
  sp.block_index = pattern.block_index.data_as<const int32_t>();
  sp.max_blocks = static_cast<int>(pattern.block_index.dim(2));
  if (pattern.column_counts.defined()) {
    sp.column_counts = pattern.column_counts.data_as<const int32_t>();
    sp.column_index = pattern.column_index.data_as<const int32_t>();
    sp.max_columns = static_cast<int>(pattern.column_index.dim(2));
  }
  sp.block_size = static_cast<int>(pattern.block_size);
  sp.ctx = static_cast<int>(meta.max_context_len);
  sp.num_rows = static_cast<int>(T);
  sp.num_query_blocks = static_cast<int>(pattern.block_counts.dim(1));
  sp.first_block = sp.ctx - sp.num_rows;
  sp.first_block /= sp.block_size;
  NANOVLLM_CHECK(attn::launch_block_sparse_wgmma(p, sp, static_cast<int>(D), stream_of(s), dca != nullptr), op,
                 ": needs an sm_90a binary on a compute-capability 9.0 GPU and head_dim 64 or 128 (head_dim ", D, ")");
}

}  // namespace nanovllm::cuda_ops
