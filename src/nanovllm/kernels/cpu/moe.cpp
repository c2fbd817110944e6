// Mixture-of-experts reference kernels (kernels/moe_ops.h): routing as transformers' Qwen3MoeSparseMoeBlock
// does it (fp32 softmax, torch.topk's CPU algorithm, optional renormalisation), the stable grouping of the
// (token, slot) pairs by expert, each expert's SwiGLU MLP over its rows (cpu::linear / cpu::silu_mul on the
// expert's slice of the stacked weights) and the weighted combine.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "nanovllm/core/parallel.h"
#include "nanovllm/kernels/cpu/cpu_moe_ops.h"
#include "nanovllm/kernels/cpu/cpu_ops.h"
#include "nanovllm/kernels/cpu/row_io.h"

namespace nanovllm::cpu {
namespace {

// torch.topk(largest=True, sorted=True) on the CPU (aten/src/ATen/native/TopKImpl.h): (value, index) pairs
// in index order, compared by value alone with NaN above everything; std::partial_sort when 64 k <= n,
// otherwise std::nth_element at k - 1 followed by std::sort of the first k - 1. Running the same
// algorithms on the same sequence gives the same order of equal values (libstdc++, as PyTorch's builds).
void torch_topk(std::vector<std::pair<float, int64_t>>& queue, int64_t k) {
  auto greater = [](const std::pair<float, int64_t>& x, const std::pair<float, int64_t>& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
  };
  const auto kth = queue.begin() + k;
  if (k * 64 <= static_cast<int64_t>(queue.size())) {
    std::partial_sort(queue.begin(), kth, queue.end(), greater);
  } else {
    std::nth_element(queue.begin(), kth - 1, queue.end(), greater);
    std::sort(queue.begin(), kth - 1, greater);
  }
}

// A 2-D view of expert e's [rows, cols] slice of a stacked [E, rows, cols] weight.
TensorView expert_slice(const TensorView& w, int64_t e) {
  const int64_t rows = w.dim(1), cols = w.dim(2);
  return TensorView(static_cast<char*>(w.data()) + static_cast<size_t>(e * rows * cols) * dtype_size(w.dtype()),
                    w.dtype(), Shape{rows, cols}, w.device());
}

// Scratch bytes holding a [rows, cols] tensor of `dtype`.
TensorView scratch_view(std::vector<uint8_t>& buf, DType dtype, int64_t rows, int64_t cols) {
  const size_t bytes = static_cast<size_t>(rows * cols) * dtype_size(dtype);
  if (buf.size() < bytes) buf.resize(bytes);
  return TensorView(buf.data(), dtype, Shape{rows, cols});
}

}  // namespace

void moe_route(TensorView topk_ids, TensorView topk_weights, TensorView router_logits, bool renormalize) {
  const int64_t T = router_logits.dim(0), E = router_logits.dim(1), k = topk_ids.dim(1);
  parallel_for(T, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> logits;
    thread_local std::vector<std::pair<float, int64_t>> queue;
    float* l = scratch_f32(logits, E);  // [E]
    queue.resize(static_cast<size_t>(E));
    for (int64_t t = b; t < e; ++t) {
      load_row_f32(router_logits.data(), router_logits.dtype(), t * E, E, l);
      // softmax(dim=-1, dtype=float): exp(l - max) / sum, the sum in double, each probability rounded once.
      float m = l[0];
      for (int64_t i = 1; i < E; ++i) m = std::max(m, l[i]);
      double sum = 0.0;
      for (int64_t i = 0; i < E; ++i) sum += std::exp(static_cast<double>(l[i]) - m);
      for (int64_t i = 0; i < E; ++i)
        queue[static_cast<size_t>(i)] = {static_cast<float>(std::exp(static_cast<double>(l[i]) - m) / sum), i};
      torch_topk(queue, k);
      double chosen = 0.0;
      for (int64_t j = 0; j < k; ++j) chosen += queue[static_cast<size_t>(j)].first;
      int32_t* ids = topk_ids.data_as<int32_t>() + t * k;
      float* w = topk_weights.data_as<float>() + t * k;
      for (int64_t j = 0; j < k; ++j) {
        const auto& [p, id] = queue[static_cast<size_t>(j)];
        ids[j] = static_cast<int32_t>(id);
        w[j] = renormalize ? static_cast<float>(p / chosen) : p;
      }
    }
  }, 4);
}

void moe_group(const ops::MoeGroups& g, TensorView topk_ids) {
  // A stable counting sort of the pairs by expert.
  const int64_t P = topk_ids.numel(), E = g.expert_offsets.dim(0) - 1;
  const int32_t* ids = topk_ids.data_as<const int32_t>();
  int32_t* offsets = g.expert_offsets.data_as<int32_t>();
  int32_t* sorted = g.sorted_pairs.data_as<int32_t>();
  int32_t* rows = g.pair_rows.data_as<int32_t>();
  std::fill(offsets, offsets + E + 1, 0);
  for (int64_t p = 0; p < P; ++p) ++offsets[ids[p] + 1];
  for (int64_t e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
  int32_t* active = g.active_experts.data_as<int32_t>();
  int64_t num_active = 0;
  for (int64_t e = 0; e < E; ++e)
    if (offsets[e + 1] > offsets[e]) active[num_active++] = static_cast<int32_t>(e);
  std::fill(active + num_active, active + E, -1);
  std::vector<int32_t> next(offsets, offsets + E);  // the next free row of each expert
  for (int64_t p = 0; p < P; ++p) {
    const int32_t r = next[static_cast<size_t>(ids[p])]++;
    sorted[r] = static_cast<int32_t>(p);
    rows[p] = r;
  }
}

void moe_experts(TensorView rows, TensorView x, TensorView gate_up_w, TensorView down_w, const ops::MoeGroups& g,
                 TensorView act) {
  const int64_t T = x.dim(0), H = x.dim(1), P = rows.dim(0), k = P / T;
  const int64_t E = gate_up_w.dim(0), Im = down_w.dim(2);
  const int32_t* offsets = g.expert_offsets.data_as<const int32_t>();
  const int32_t* sorted = g.sorted_pairs.data_as<const int32_t>();
  std::vector<int32_t> tokens;       // [n] the expert's rows' tokens
  std::vector<uint8_t> xs_buf, gate_up_buf;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = offsets[e], n = offsets[e + 1] - r0;
    if (n == 0) continue;  // an expert no token chose reads no weights
    tokens.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>(sorted[r0 + i] / k);
    const TensorView token_rows(tokens.data(), DType::kI32, Shape{n});
    const TensorView xs = scratch_view(xs_buf, x.dtype(), n, H);  // [n, H] the rows' tokens
    gather_rows(xs, x, token_rows);
    const TensorView gate_up = scratch_view(gate_up_buf, act.dtype(), n, 2 * Im);  // [n, 2 Im]
    linear(gate_up, xs, expert_slice(gate_up_w, e), TensorView());
    const TensorView a = act.slice_rows(r0, r0 + n);  // [n, Im]
    silu_mul(a, gate_up);
    linear(rows.slice_rows(r0, r0 + n), a, expert_slice(down_w, e), TensorView());  // [n, H]
  }
}

void moe_combine(TensorView out, TensorView rows, TensorView topk_weights, TensorView pair_rows) {
  const int64_t T = out.dim(0), H = out.dim(1), k = topk_weights.dim(1);
  const float* w = topk_weights.data_as<const float>();
  const int32_t* pr = pair_rows.data_as<const int32_t>();
  parallel_for(T, [&](int64_t b, int64_t e) {
    thread_local std::vector<float> acc_buf, row_buf;
    float* acc = scratch_f32(acc_buf, H);  // [H]
    float* row = scratch_f32(row_buf, H);  // [H]
    for (int64_t t = b; t < e; ++t) {
      std::fill(acc, acc + H, 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        load_row_f32(rows.data(), rows.dtype(), int64_t{pr[t * k + j]} * H, H, row);
        const float wj = w[t * k + j];
        for (int64_t h = 0; h < H; ++h) acc[h] += wj * row[h];
      }
      store_row_f32(acc, H, out.data(), out.dtype(), t * H);
    }
  }, 4);
}

}  // namespace nanovllm::cpu
