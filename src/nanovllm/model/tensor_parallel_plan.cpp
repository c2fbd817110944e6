#include "nanovllm/model/tensor_parallel_plan.h"

#include <algorithm>

#include "nanovllm/core/error.h"

namespace nanovllm {

int64_t ShardSlice::extent() const {
  int64_t n = pad;
  for (const IndexRange& r : ranges) n += r.size();
  return n;
}

void validate_tensor_parallel(const ModelConfig& cfg, int64_t size) {
  NANOVLLM_CHECK(size >= 1, "tensor_parallel_size must be >= 1, got ", size);
  NANOVLLM_CHECK(cfg.num_attention_heads % size == 0, "tensor_parallel_size ", size,
                 " does not divide num_attention_heads ", cfg.num_attention_heads);
  if (cfg.has_dense_layer())
    NANOVLLM_CHECK(cfg.intermediate_size % size == 0, "tensor_parallel_size ", size,
                   " does not divide intermediate_size ", cfg.intermediate_size);
  if (cfg.moe.enabled())
    NANOVLLM_CHECK(cfg.moe.moe_intermediate_size % size == 0, "tensor_parallel_size ", size,
                   " does not divide moe_intermediate_size ", cfg.moe.moe_intermediate_size,
                   " (each rank holds an equal share of every expert)");
  const int64_t hk = cfg.num_key_value_heads;
  NANOVLLM_CHECK(hk > 0 && (hk % size == 0 || size % hk == 0), "tensor_parallel_size ", size,
                 " and num_key_value_heads ", hk,
                 ": one must divide the other (KV heads are split, or replicated when there are more ranks)");
}

TensorParallelPlan shard_for_rank(const ModelConfig& cfg, int64_t rank, int64_t size) {
  validate_tensor_parallel(cfg, size);
  NANOVLLM_CHECK(rank >= 0 && rank < size, "tensor-parallel rank ", rank, " outside [0, ", size, ")");
  const int64_t d = cfg.head_dim, hq = cfg.num_attention_heads, hk = cfg.num_key_value_heads;
  TensorParallelPlan p;
  p.rank = rank;
  p.size = size;
  p.num_heads = hq / size;
  p.q_head_begin = rank * p.num_heads;
  if (hk % size == 0) {  // split
    p.num_kv_heads = hk / size;
    p.kv_head_begin = rank * p.num_kv_heads;
  } else {  // replicated: N / Hk consecutive ranks share one KV head; their query heads all read it
    p.num_kv_heads = 1;
    p.kv_head_begin = rank / (size / hk);
  }
  p.intermediate = cfg.intermediate_size / size;
  p.vocab_per_rank = (cfg.vocab_size + size - 1) / size;
  const int64_t vb = std::min(cfg.vocab_size, rank * p.vocab_per_rank);
  p.vocab = {vb, std::min(cfg.vocab_size, vb + p.vocab_per_rank)};

  using Axis = ShardSlice::Axis;
  const IndexRange q_rows{p.q_head_begin * d, (p.q_head_begin + p.num_heads) * d};
  const int64_t k0 = hq * d, v0 = (hq + hk) * d;  // where k and v rows start in the fused qkv
  const IndexRange kv_heads{p.kv_head_begin * d, (p.kv_head_begin + p.num_kv_heads) * d};
  p.qkv_proj = {Axis::kRows, {q_rows, {k0 + kv_heads.begin, k0 + kv_heads.end}, {v0 + kv_heads.begin, v0 + kv_heads.end}}};
  p.qkv_bias = p.qkv_proj;
  p.o_proj = {Axis::kColumns, {q_rows}};
  p.o_bias = {Axis::kFirstRankOnly, {}};
  const int64_t i = cfg.intermediate_size, ib = rank * p.intermediate;
  p.gate_up_proj = {Axis::kRows, {{ib, ib + p.intermediate}, {i + ib, i + ib + p.intermediate}}};
  p.down_proj = {Axis::kColumns, {{ib, ib + p.intermediate}}};
  if (cfg.moe.enabled()) {
    const int64_t im = cfg.moe.moe_intermediate_size;
    p.moe_intermediate = im / size;
    const int64_t mb = rank * p.moe_intermediate;
    p.experts_gate_up.axis = Axis::kRows;
    for (int64_t e = 0; e < cfg.moe.num_experts; ++e) {
      const int64_t gate = e * 2 * im, up = gate + im;  // expert e's gate and up rows in the stacked tensor
      p.experts_gate_up.ranges.push_back({gate + mb, gate + mb + p.moe_intermediate});
      p.experts_gate_up.ranges.push_back({up + mb, up + mb + p.moe_intermediate});
    }
    p.experts_down = {Axis::kColumns, {{mb, mb + p.moe_intermediate}}};
  }
  p.embed_tokens = {Axis::kRows, {p.vocab}, p.vocab_per_rank - p.vocab.size()};
  p.lm_head = p.embed_tokens;
  return p;
}

ModelConfig rank_config(const ModelConfig& cfg, const TensorParallelPlan& plan) {
  ModelConfig c = cfg;
  c.num_attention_heads = plan.num_heads;
  c.num_key_value_heads = plan.num_kv_heads;
  c.intermediate_size = plan.intermediate;
  c.moe.moe_intermediate_size = plan.moe_intermediate;
  return c;
}

std::vector<ElementRun> shard_runs(const ShardSlice& slice, int64_t rows, int64_t cols) {
  const int64_t limit = slice.axis == ShardSlice::Axis::kColumns ? cols : rows;
  for (const IndexRange& r : slice.ranges)
    NANOVLLM_CHECK(0 <= r.begin && r.begin <= r.end && r.end <= limit, "shard range [", r.begin, ", ", r.end,
                   ") outside the tensor's ", limit, slice.axis == ShardSlice::Axis::kColumns ? " columns" : " rows");
  std::vector<ElementRun> runs;
  int64_t dst = 0;
  switch (slice.axis) {
    case ShardSlice::Axis::kRows:
      for (const IndexRange& r : slice.ranges) {
        if (r.size() > 0) runs.push_back({r.begin * cols, dst, r.size() * cols});
        dst += r.size() * cols;
      }
      break;
    case ShardSlice::Axis::kColumns:
      for (int64_t row = 0; row < rows; ++row)
        for (const IndexRange& r : slice.ranges) {
          if (r.size() > 0) runs.push_back({row * cols + r.begin, dst, r.size()});
          dst += r.size();
        }
      break;
    default: runs.push_back({0, 0, rows * cols});
  }
  return runs;
}

}  // namespace nanovllm
