// The knobs of the sparse prefill pattern estimators (kernels/pattern_estimators.h), with the published defaults. Every
// estimator also takes the pattern's block size (BlockSparsePattern::block_size, 128) and always lists the first (sink)
// key block and the diagonal block of every query block.
#pragma once

#include <cstdint>

namespace nanovllm::ops {

// kBlockBudget: XAttention's and AvgPool's max_blocks bounds a prefill's attention work whatever the data (a flat
// attention, as of a random-weight model, keeps nearly every block at any mass threshold once a GQA group's choices are
// united). When the group's union lists more, the row keeps the sink and diagonal blocks, then the blocks by decreasing
// rank (ties: the lower index), a block's rank being the largest mass any query head of the group gave it: the max, not
// the mean, so a block that one head needs stays (the head-averaging miss the seeds record). Needs threshold < 1.

// XAttention (Xu et al. 2025): block importance from antidiagonal sums of stride x stride tiles of q.k.
struct XAttentionParams {
  int64_t stride = 8;       // tile side; divides the block size
  double threshold = 0.95;  // tau: share of each query block's estimated attention mass kept
                            // (the seeds' engine default; their factory used 0.9); >= 1 keeps every causal block
  int64_t max_blocks = 0;   // per (KV head, query block) at most this many key blocks, sink and diagonal included
                            // (kBlockBudget); 0: no limit
};

// MInference vertical-slash (Jiang et al. 2024): from the chunk's last queries, the key columns (verticals) and
// diagonals (slashes) with the most attention; slashes become the key blocks covering them, verticals outside those
// blocks become column lists.
struct VerticalSlashParams {
  int64_t last_q = 64;             // queries the estimate looks at (the chunk's last ones)
  int64_t vertical = 1000;         // columns kept per query head (sinks included)
  int64_t slash = 6096;            // diagonals kept per query head (recent ones included)
  int64_t sink_tokens = 30;        // columns [0, sink_tokens) always kept
  int64_t recent_diagonals = 100;  // diagonals [0, recent_diagonals) always kept (the local window)
};

// FlexPrefill (Lai et al. 2025): per query head, query-aware block selection when the pooled estimate agrees with the
// last block of queries' true attention (sqrt Jensen-Shannon distance < tau), else vertical-slash at block granularity;
// either covers a cumulative attention mass gamma.
struct FlexPrefillParams {
  double gamma = 0.9;         // attention mass to cover; >= 1 keeps every causal block
  double tau = 0.1;           // JS distance below which a head is query-aware
  int64_t min_budget = 1024;  // tokens: at least ceil(min_budget / block) vertical and slash blocks
};

// AvgPool: block-mean pooled q and k, softmax over a query block's causal key blocks, blocks kept up to a cumulative
// share of that mass.
struct AvgPoolParams {
  double threshold = 0.9;  // share of the pooled mass kept; >= 1 keeps every causal block
  int64_t max_blocks = 0;  // per (KV head, query block) at most this many key blocks (kBlockBudget); 0: no limit
};

}  // namespace nanovllm::ops
