// dual_chunk_attention dispatcher (kernels/dual_chunk_ops.h). A step whose every context fits the first chunk
// is plain attention on the intra rotation (paged_attention: the tuned decode and prefill kernels, exactly the
// same math). Otherwise decodes (every query one token, or a mixed step's leading decodes) take the split-KV decode
// kernel with the three rotations (tensor cores for head_dim 64 / 128, reloading a warp's Q fragments at region
// changes; SIMT for 256), and the rest the prefill kernel: the sm_90a wgmma one (head_dim 64 / 128, reloading its Q
// tile at chunk starts), else the SIMT one. Every kernel scores a key tile with one query rotation, so chunk_len
// must be a multiple of the largest key tile (128).
#include "nanovllm/kernels/cuda/attention_common.cuh"
#include "nanovllm/kernels/cuda/cuda_dual_chunk_ops.h"
#include "nanovllm/kernels/cuda/cuda_ops.h"
#include "nanovllm/kernels/cuda/device_context.h"

namespace nanovllm::cuda_ops {

void dual_chunk_attention(TensorView out, TensorView q, TensorView k_cache, TensorView v_cache,
                          const AttentionMetadata& meta, const ops::DualChunkParams& dca, float scale, ops::Stream s) {
  const int64_t T = q.dim(1), Hq = q.dim(2), D = q.dim(3);
  if (T == 0 || meta.num_seqs == 0) return;
  // The wgmma prefill's key tile is 128 keys; the SIMT kernels' 32 divide it.
  NANOVLLM_CHECK(dca.chunk_len % ops::kCudaDualChunkLenMultiple == 0, "dual_chunk_attention (cuda): the chunk length ",
                 dca.chunk_len, " (dual_chunk_attention_config chunk_size - local_size) must be a multiple of ",
                 ops::kCudaDualChunkLenMultiple);
  const TensorView q_intra(q.data(), q.dtype(), Shape{T, Hq, D}, q.device());  // [T, Hq, D]
  if (meta.max_context_len <= dca.chunk_len) {  // every key in the first chunk: plain attention
    cuda_ops::paged_attention(out, q_intra, k_cache, v_cache, meta, scale, s);
    return;
  }
  attn::Params p = attn::attention_params(out, q_intra, k_cache, v_cache, meta, scale);
  p.q_succ = p.q + T * Hq * D;
  p.q_inter = p.q + 2 * T * Hq * D;
  p.dca_chunk_len = static_cast<int>(dca.chunk_len);
  const int d = static_cast<int>(D);
  if (meta.max_query_len == 1) {
    attn::launch_dual_chunk_decode(p, d, meta.max_context_len, s);
    return;
  }
  const int nd = static_cast<int>(meta.num_leading_decodes);
  if (nd > 0) {
    attn::Params dp = p;
    dp.num_seqs = nd;
    attn::launch_dual_chunk_decode(dp, d, meta.max_context_len, s);
  }
  if (nd == p.num_seqs) return;
  attn::Params pp = p;  // rows index through cu_seqlens: the prefill part is the same arrays from sequence nd on
  pp.cu += nd;
  pp.ctx += nd;
  pp.bt += int64_t{nd} * p.max_blocks;
  pp.num_seqs = p.num_seqs - nd;
  const cudaStream_t st = stream_of(s);
  const bool wgmma = context_of(s).options.prefill_wgmma && attn::launch_prefill_wgmma(pp, d, T - nd, st, /*dca=*/true);
  if (!wgmma) attn::launch_prefill(pp, d, T - nd, st, /*dca=*/true);
}

}  // namespace nanovllm::cuda_ops
