// CPU reference kernels of the sparse prefill pattern estimators (kernels/pattern_estimators.h has the contracts; the
// entry points validate before calling these). Each reads the chunk's queries q [T, Hq, D] and the sequence's keys
// through block_table from k_cache [NB, BS, Hk, D], and writes the pattern views: block_counts [Hk, NQB], block_index
// [Hk, NQB, MAXB], column_counts/column_index (vertical-slash only).
#pragma once

#include <cstdint>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/cpu/prefill_pattern.h"
#include "nanovllm/kernels/estimator_params.h"

namespace nanovllm::cpu {

struct PatternOut {
  TensorView block_counts, block_index, column_counts, column_index;
};

void xattention_estimate(const PatternOut& out, TensorView q, const KvCacheTensor& k_cache,
                         const int32_t* block_table, const PrefillChunk& c, const ops::XAttentionParams& p);
void vertical_slash_estimate(const PatternOut& out, TensorView q, const KvCacheTensor& k_cache,
                             const int32_t* block_table, const PrefillChunk& c, const ops::VerticalSlashParams& p);
void flexprefill_estimate(const PatternOut& out, TensorView q, const KvCacheTensor& k_cache,
                          const int32_t* block_table, const PrefillChunk& c, const ops::FlexPrefillParams& p);
void avgpool_estimate(const PatternOut& out, TensorView q, const KvCacheTensor& k_cache,
                      const int32_t* block_table, const PrefillChunk& c, const ops::AvgPoolParams& p);

}  // namespace nanovllm::cpu
