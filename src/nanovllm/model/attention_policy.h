// A replacement for a layer's dense attention: the sparse policies (sparse/) implement it, the runner
// passes one in DecoderInputs, and Decoder::layer calls it after the step's K/V are in the cache.
// Defined here, below sparse/, so the model can call policies without depending on them.
#pragma once

#include <cstdint>

#include "nanovllm/core/error.h"
#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/attention_metadata.h"
#include "nanovllm/kernels/dual_chunk_ops.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm {

struct LayerKvCache;

class AttentionPolicy {
 public:
  virtual ~AttentionPolicy() = default;
  // Called for every layer of every step once q [T, Hq, D] is made and the step's K/V are stored in
  // `kv` at meta.slot_mapping (so the policy can index what was written). Either writes the attention
  // output out [T, Hq, D] itself and returns true, or returns false: the model then runs dense
  // paged_attention. Must not change the cache.
  virtual bool attend(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                      const AttentionMetadata& meta, float scale, ops::Stream s) = 0;
  // The same for a Dual Chunk Attention model (kernels/dual_chunk_ops.h): q [3, T, Hq, D] holds the three
  // rotations of dual_chunk_qkv_prologue; returning false leaves the layer to dense dual_chunk_attention. A
  // policy that does not implement it refuses (never attends a DCA model as plain attention).
  virtual bool attend_dual_chunk(int64_t /*layer*/, TensorView /*out*/, TensorView /*q*/, const LayerKvCache& /*kv*/,
                                 const AttentionMetadata& /*meta*/, const ops::DualChunkParams& /*dca*/,
                                 float /*scale*/, ops::Stream /*s*/) {
    NANOVLLM_CHECK(false, "this attention policy does not run with Dual Chunk Attention (the model's "
                   "dual_chunk_attention_config)");
    return false;
  }
};

}  // namespace nanovllm
