// LinearChoices: the linear dispatch's timed options per shape (linear_tuning.h).
#include <utility>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/linear_tuning.h"

namespace nanovllm::cuda_ops {

const char* linear_fusion_tag(LinearFusion f) {
  switch (f) {
    case LinearFusion::kSiluMulIn: return " (silu in)";
    case LinearFusion::kSiluMulOut: return " (silu out)";
    default: return "";
  }
}

const char* linear_other_option(LinearFusion f) {
  switch (f) {
    case LinearFusion::kSiluMulIn: return "silu_mul + linear";
    case LinearFusion::kSiluMulOut: return "linear + silu_mul";
    default: return "cuBLASLt";
  }
}

std::string describe(const LinearChoice& c, LinearFusion f) {
  if (!c.gemv) return linear_other_option(f);
  return "gemv RT " + std::to_string(c.cfg.rows_tiles_per_cta) + " split " + std::to_string(c.cfg.k_split) +
         " stream " + std::to_string(c.cfg.stream_steps) + " bulk " + std::to_string(c.cfg.bulk_units);
}

std::optional<LinearChoice> LinearChoices::find(const LinearShape& shape) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = shapes_.find(shape);
  if (it == shapes_.end()) return std::nullopt;
  return it->second.choices[static_cast<size_t>(it->second.current)];
}

LinearChoice LinearChoices::record(const LinearShape& shape, std::vector<LinearChoice> options,
                                   std::vector<float> alone_us) {
  NANOVLLM_CHECK(!options.empty() && options.size() == alone_us.size(), "LinearChoices::record: ", options.size(),
                 " options with ", alone_us.size(), " times");
  std::lock_guard<std::mutex> lock(mu_);
  Options& o = shapes_[shape];
  o.choices = std::move(options);
  o.alone_us = std::move(alone_us);
  o.current = 0;
  o.tuned = false;
  return o.choices[0];
}

std::vector<LinearTunable> LinearChoices::tunables(int64_t t) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LinearTunable> out;
  for (const auto& [shape, o] : shapes_) {
    if (shape.t != t || o.choices.size() < 2 || o.tuned) continue;
    LinearTunable lt;
    lt.shape = shape;
    for (const LinearChoice& c : o.choices) lt.options.push_back(describe(c, shape.fusion));
    lt.alone_us = o.alone_us;
    lt.current = o.current;
    out.push_back(std::move(lt));
  }
  return out;
}

LinearChoices::Options& LinearChoices::options_of(const LinearShape& shape) {
  const auto it = shapes_.find(shape);
  NANOVLLM_CHECK(it != shapes_.end(), "linear tuning: no timed shape T=", shape.t, " N=", shape.n, " K=", shape.k);
  return it->second;
}

void LinearChoices::use_option(const LinearShape& shape, int option) {
  std::lock_guard<std::mutex> lock(mu_);
  Options& o = options_of(shape);
  NANOVLLM_CHECK(option >= 0 && option < static_cast<int>(o.choices.size()), "linear tuning: no option ", option,
                 " for T=", shape.t, " N=", shape.n, " K=", shape.k);
  o.current = option;
}

void LinearChoices::mark_tuned(const LinearShape& shape) {
  std::lock_guard<std::mutex> lock(mu_);
  options_of(shape).tuned = true;
}

}  // namespace nanovllm::cuda_ops
