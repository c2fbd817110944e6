// Tensor-parallel sharding (docs/tensor_parallel.md): which rows or columns of each weight one rank of
// `size` holds, and the element runs (shard_runs) that cut them out. Pure functions of the ModelConfig — no
// device, no communicator — so the loader (each rank reads only its slices) and the tests share them.
//
// H = hidden_size, I = intermediate_size, V = vocab_size, Hq/Hk = q/kv heads, D = head_dim, N = size.
//   qkv_proj, gate_up_proj: column-parallel (rows of the [out, in] weight split; output stays local)
//   o_proj, down_proj:      row-parallel (columns split; each rank's output is a partial sum -> all-reduce)
//   embed_tokens, lm_head:  vocab-parallel (rows split in ceil(V / N) blocks, the last one zero-padded)
// KV heads: split when N divides Hk; replicated when Hk divides N (each rank holds the one KV head its
// query heads read, shared by N / Hk ranks). GQA grouping is kept on every rank.
// MoE layers (E experts of intermediate size Im): tensor parallel inside every expert (docs/moe.md) — each
// rank holds Im / N intermediate columns of all E experts (column-parallel gate/up, row-parallel down,
// the same all-reduce as a dense MLP); the router is replicated, so every rank routes every token alike.
#pragma once

#include <cstdint>
#include <vector>

#include "nanovllm/model/config.h"

namespace nanovllm {

// Half-open [begin, end) of rows (or columns) of a full tensor.
struct IndexRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const IndexRange&) const = default;
};

// One rank's share of one tensor: the listed ranges of the full tensor's rows (kRows) or columns (kColumns),
// concatenated in order, then `pad` zero rows (vocab-parallel only). kReplicated: the whole tensor.
// kFirstRankOnly: the whole tensor on rank 0, nothing elsewhere (a bias added once after the all-reduce).
struct ShardSlice {
  enum class Axis { kReplicated, kRows, kColumns, kFirstRankOnly };
  Axis axis = Axis::kReplicated;
  std::vector<IndexRange> ranges;
  int64_t pad = 0;
  int64_t extent() const;  // rows (kRows) or columns (kColumns) of the rank's tensor, padding included
};

// Where one rank's cut comes from and what it holds; identical for every decoder layer.
struct TensorParallelPlan {
  int64_t rank = 0, size = 1;
  int64_t num_heads = 0;       // Hq / N query heads: [q_head_begin, q_head_begin + num_heads)
  int64_t q_head_begin = 0;
  int64_t num_kv_heads = 0;    // max(Hk / N, 1): [kv_head_begin, kv_head_begin + num_kv_heads)
  int64_t kv_head_begin = 0;
  int64_t intermediate = 0;    // I / N
  int64_t moe_intermediate = 0;  // Im / N (MoE models)
  IndexRange vocab;            // token ids this rank's embedding / LM head rows cover (may be empty)
  int64_t vocab_per_rank = 0;  // ceil(V / N): rows of every rank's embedding / LM head, padding included

  ShardSlice qkv_proj;      // kRows: this rank's q rows, then k rows, then v rows -> [(h + 2 hk) D, H]
  ShardSlice qkv_bias;      // same rows as qkv_proj
  ShardSlice o_proj;        // kColumns: the columns of this rank's q heads -> [H, h D]
  ShardSlice o_bias;        // kFirstRankOnly
  ShardSlice gate_up_proj;  // kRows: this rank's gate rows, then its up rows -> [2 I / N, H]
  ShardSlice down_proj;     // kColumns -> [H, I / N]
  ShardSlice experts_gate_up;  // kRows of [E 2 Im, H]: per expert its gate rows, then its up rows -> [E 2 Im / N, H]
  ShardSlice experts_down;     // kColumns of [E H, Im] -> [E H, Im / N]
  ShardSlice embed_tokens;  // kRows + padding -> [ceil(V / N), H]
  ShardSlice lm_head;       // same as embed_tokens
  // Replicated: the layer norms, q_norm / k_norm (per head, [D]), the final norm, the MoE router.
};

// Throws nanovllm::Error naming the field and the values unless `size` ranks can split `cfg`: size >= 1,
// size divides num_attention_heads, intermediate_size (when a layer is dense) and moe_intermediate_size (MoE
// models), and size divides num_key_value_heads or num_key_value_heads divides size. The vocabulary never
// blocks a split (it is padded).
void validate_tensor_parallel(const ModelConfig& cfg, int64_t size);

// Rank `rank` of `size`; validates as above and 0 <= rank < size.
TensorParallelPlan shard_for_rank(const ModelConfig& cfg, int64_t rank, int64_t size);

// The config one rank's decoder runs with: its query / KV heads and (expert) intermediate columns; everything else
// (the vocabulary included: the logits are gathered whole) as in `cfg`.
ModelConfig rank_config(const ModelConfig& cfg, const TensorParallelPlan& plan);

// A contiguous run of one rank's tensor: `count` elements from element `src` of the full row-major tensor
// to element `dst` of the rank's.
struct ElementRun {
  int64_t src = 0, dst = 0, count = 0;
  bool operator==(const ElementRun&) const = default;
};
// The runs that make up `slice` of a full [rows, cols] tensor, in destination order (kReplicated and
// kFirstRankOnly: the whole tensor); the rank's elements after the last run are the zero padding rows.
// Throws if a range falls outside the tensor.
std::vector<ElementRun> shard_runs(const ShardSlice& slice, int64_t rows, int64_t cols);

}  // namespace nanovllm
