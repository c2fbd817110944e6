// Several attention policies on one engine (a sparse decode policy and a sparse prefill policy): each step asks
// them in order and the first that attends wins; none: dense attention. Every policy before the one that attends
// is asked, so one that keeps metadata (Quest's page min/max) sees every step.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "nanovllm/model/attention_policy.h"

namespace nanovllm {

class AttentionPolicyChain final : public AttentionPolicy {
 public:
  explicit AttentionPolicyChain(std::vector<AttentionPolicy*> policies) : policies_(std::move(policies)) {}

  bool attend(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv, const AttentionMetadata& meta,
              float scale, ops::Stream s) override {
    for (AttentionPolicy* p : policies_)
      if (p->attend(layer, out, q, kv, meta, scale, s)) return true;
    return false;
  }
  bool attend_dual_chunk(int64_t layer, TensorView out, TensorView q, const LayerKvCache& kv,
                         const AttentionMetadata& meta, const ops::DualChunkParams& dca, float scale,
                         ops::Stream s) override {
    for (AttentionPolicy* p : policies_)
      if (p->attend_dual_chunk(layer, out, q, kv, meta, dca, scale, s)) return true;
    return false;
  }

 private:
  std::vector<AttentionPolicy*> policies_;  // not owned
};

}  // namespace nanovllm
