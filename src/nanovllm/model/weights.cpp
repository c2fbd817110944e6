#include "nanovllm/model/weights.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <thread>

#include "nanovllm/core/error.h"
#include "nanovllm/core/logging.h"
#include "nanovllm/kernels/fp8_block.h"
#include "nanovllm/model/safetensors.h"
#include "nanovllm/model/weight_parts.h"

namespace nanovllm {
namespace {

std::string layer_prefix(int64_t i) { return "model.layers." + std::to_string(i) + "."; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// One owned tensor: the row-wise concatenation of checkpoint tensors (one for most, q/k/v or gate/up merged),
// or one rank's runs of it (WeightLoadOptions::shard).
struct OutputTensor {
  std::vector<std::string> names;        // the checkpoint parts'
  std::vector<const TensorInfo*> parts;
  std::vector<const TensorInfo*> scales;  // per part: its checkpoint block scales (fp8 parts), else null
  bool quantize = false;                  // quantize the dense parts per block at load (quantize_fp8)
  std::vector<ElementRun> runs;  // output elements from the merged source's; after the last: zeros (padding)
  Shape shape;                   // the output's
  DType dtype = DType::kBF16;    // F8E4M3: kept fp8, with its block scales below
  size_t offset = 0;  // into the arena
  TensorView* target = nullptr;
  int64_t stack = 0;  // > 0: the target views shape [R, C] as [stack, R / stack, C]
  TensorView* scale_target = nullptr;  // kept fp8: the parts' block scales, merged by rows and sliced like the weight
  std::vector<ElementRun> scale_runs;
  Shape scale_shape;
  size_t scale_offset = 0;
};

class Loader {
 public:
  Loader(const WeightLoadOptions& opt) : opt_(opt) {
    threads_ = opt.num_threads > 0 ? opt.num_threads
                                   : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  }

  // Reads `out`'s parts (quantizing them if asked) and writes the weight, and its block scales when kept fp8,
  // into the arena at `base`.
  void load(const OutputTensor& out, char* base) {
    std::vector<PartSource> parts;
    for (size_t k = 0; k < out.parts.size(); ++k)
      parts.push_back(read_part(out.names[k], *out.parts[k], out.scales[k], out.quantize, threads_));
    copy(parts, out.runs, out.shape.numel(), out.dtype, base + out.offset);
    if (out.scale_target == nullptr) return;
    std::vector<PartSource> scales;
    for (const PartSource& p : parts)
      scales.push_back({p.scale.data(), DType::kF32, Shape{static_cast<int64_t>(p.scale.size())}, {}, {}});
    copy(scales, out.scale_runs, out.scale_shape.numel(), DType::kF32, base + out.scale_offset);
  }

 private:
  // Writes `total` elements of `dtype` to dst (allocator memory): `runs` of the row-wise concatenation of
  // `parts`, zeros after the last run. Piece by piece: each piece is converted in parallel into host memory
  // (the destination itself when it is host memory and no upload is set) and uploaded.
  void copy(const std::vector<PartSource>& parts, const std::vector<ElementRun>& runs, int64_t total, DType dtype,
            char* dst) {
    const size_t osz = dtype_size(dtype);
    std::vector<int64_t> starts;  // element index of the merged source where each part starts
    int64_t merged = 0;
    for (const PartSource& p : parts) {
      starts.push_back(merged);
      merged += p.shape.numel();
    }
    // Source elements [a, a + n) of the merged tensor into `to`.
    auto read_source = [&](int64_t a, int64_t n, char* to) {
      for (size_t k = 0; k < parts.size() && n > 0; ++k) {
        const int64_t ps = starts[k], pe = starts[k] + parts[k].shape.numel();
        const int64_t lo = std::max(a, ps), hi = std::min(a + n, pe);
        if (lo < hi) read_part_elements(parts[k], lo - ps, hi - lo, to + static_cast<size_t>(lo - a) * osz, dtype);
      }
    };
    const int64_t covered = runs.empty() ? 0 : runs.back().dst + runs.back().count;  // then padding
    constexpr int64_t kPiece = int64_t{16} << 20;  // elements per piece: bounds the staging memory
    const bool direct = !opt_.upload;
    if (!direct && staging_.size() < static_cast<size_t>(std::min(total, kPiece)) * osz)
      staging_.resize(static_cast<size_t>(std::min(total, kPiece)) * osz);
    for (int64_t s = 0; s < total; s += kPiece) {
      const int64_t n = std::min(kPiece, total - s);
      char* host = direct ? dst + static_cast<size_t>(s) * osz : staging_.data();
      auto work = [&](int64_t a, int64_t b) {  // output elements [s + a, s + b)
        const int64_t pad_from = std::max(s + a, covered);
        if (pad_from < s + b)
          std::memset(host + static_cast<size_t>(pad_from - s) * osz, 0, static_cast<size_t>(s + b - pad_from) * osz);
        auto run = std::upper_bound(runs.begin(), runs.end(), s + a,
                                    [](int64_t e, const ElementRun& r) { return e < r.dst; });
        if (run != runs.begin()) --run;
        for (; run != runs.end() && run->dst < s + b; ++run) {
          const int64_t lo = std::max(s + a, run->dst), hi = std::min(s + b, run->dst + run->count);
          if (lo < hi) read_source(run->src + (lo - run->dst), hi - lo, host + static_cast<size_t>(lo - s) * osz);
        }
      };
      const int t = n < (int64_t{1} << 18) ? 1 : threads_;
      if (t == 1) {
        work(0, n);
      } else {
        std::vector<std::thread> pool;
        for (int i = 0; i < t; ++i) pool.emplace_back(work, n * i / t, n * (i + 1) / t);
        for (auto& th : pool) th.join();
      }
      if (!direct) opt_.upload(dst + static_cast<size_t>(s) * osz, host, static_cast<size_t>(n) * osz);
    }
  }

  const WeightLoadOptions& opt_;
  int threads_ = 1;
  std::vector<char> staging_;
};

// The slice of `target` (one of `w`'s tensors) that `plan`'s rank holds; the norms are whole.
const ShardSlice& slice_of(const ModelWeights& w, const TensorView* target, const TensorParallelPlan& plan) {
  static const ShardSlice kWhole{};
  if (target == &w.embed_tokens) return plan.embed_tokens;
  if (target == &w.lm_head) return plan.lm_head;
  for (const LayerWeights& l : w.layers) {
    if (target == &l.qkv_proj) return plan.qkv_proj;
    if (target == &l.qkv_bias) return plan.qkv_bias;
    if (target == &l.o_proj) return plan.o_proj;
    if (target == &l.o_bias) return plan.o_bias;
    if (target == &l.gate_up_proj) return plan.gate_up_proj;
    if (target == &l.down_proj) return plan.down_proj;
    if (target == &l.experts_gate_up) return plan.experts_gate_up;
    if (target == &l.experts_down) return plan.experts_down;
  }
  return kWhole;
}

// Appends `dst` and its checkpoint parts (and their transformers-native split, when it differs) to `t`.
void add_source(std::vector<WeightSource>& t, TensorView* dst, std::vector<WeightSpec> parts,
                std::vector<WeightSpec> canonical = {}) {
  if (canonical.empty()) canonical = parts;
  t.push_back({dst, std::move(parts), std::move(canonical)});
}

// Marks the last source a projection: block-scaled fp8 checkpoints hold its parts in e4m3, with their block
// scales going to `scale_target` when kept fp8 (null: always dequantized).
void projection(std::vector<WeightSource>& t, TensorView* scale_target) {
  t.back().quantizable = true;
  t.back().scale_target = scale_target;
}

// A Qwen3-MoE layer's MLP as the hub ships it: the router `mlp.gate` and per expert e
// `mlp.experts.e.{gate,up,down}_proj`, stacked into [E, 2 Im, H] (gate rows then up rows of each expert)
// and [E, H, Im].
void moe_sources(const ModelConfig& c, const std::string& p, LayerWeights& l, std::vector<WeightSource>& t) {
  const int64_t H = c.hidden_size, E = c.moe.num_experts, Im = c.moe.moe_intermediate_size;
  add_source(t, &l.router, {{p + "mlp.gate.weight", {E, H}}});
  std::vector<WeightSpec> gate_up, down;
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
    gate_up.push_back({x + "gate_proj.weight", {Im, H}});
    gate_up.push_back({x + "up_proj.weight", {Im, H}});
    down.push_back({x + "down_proj.weight", {H, Im}});
  }
  add_source(t, &l.experts_gate_up, gate_up);
  t.back().stack = E;
  projection(t, &l.experts_gate_up_scale);
  add_source(t, &l.experts_down, down);
  t.back().stack = E;
  projection(t, &l.experts_down_scale);
}

// The transformers-native layouts (model.layers.N.self_attn..., model.norm, lm_head).
void hf_sources(const ModelConfig& c, ModelWeights& m, std::vector<WeightSource>& t) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, D = c.head_dim;
  const int64_t q = c.q_size(), kv = c.kv_size();
  auto add = [&](TensorView* dst, std::vector<WeightSpec> parts, std::vector<WeightSpec> canonical = {}) {
    add_source(t, dst, std::move(parts), std::move(canonical));
  };
  auto lw = [&](int64_t i) -> LayerWeights& { return m.layers[static_cast<size_t>(i)]; };
  // Qwen2 and GLM have q/k/v biases only; Qwen3 and Llama put `attention_bias` on o_proj as well.
  const bool o_bias = c.attention_bias && c.arch != Architecture::kQwen2 && c.arch != Architecture::kGlm;
  add(&m.embed_tokens, {{"model.embed_tokens.weight", {V, H}}});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = layer_prefix(i);
    LayerWeights& l = lw(i);
    add(&l.input_layernorm, {{p + "input_layernorm.weight", {H}}});
    add(&l.qkv_proj, {{p + "self_attn.q_proj.weight", {q, H}}, {p + "self_attn.k_proj.weight", {kv, H}},
                      {p + "self_attn.v_proj.weight", {kv, H}}});
    projection(t, &l.qkv_proj_scale);
    if (c.attention_bias)
      add(&l.qkv_bias, {{p + "self_attn.q_proj.bias", {q}}, {p + "self_attn.k_proj.bias", {kv}},
                        {p + "self_attn.v_proj.bias", {kv}}});
    if (c.qk_norm) {
      add(&l.q_norm, {{p + "self_attn.q_norm.weight", {D}}});
      add(&l.k_norm, {{p + "self_attn.k_norm.weight", {D}}});
    }
    add(&l.o_proj, {{p + "self_attn.o_proj.weight", {H, q}}});
    projection(t, &l.o_proj_scale);
    if (o_bias) add(&l.o_bias, {{p + "self_attn.o_proj.bias", {H}}});
    add(&l.post_attention_layernorm, {{p + "post_attention_layernorm.weight", {H}}});
    if (c.is_moe_layer(i)) {
      moe_sources(c, p, l, t);
    } else {
      if (c.arch == Architecture::kGlm) {
        add(&l.gate_up_proj, {{p + "mlp.gate_up_proj.weight", {2 * I, H}}});  // fused: gate rows then up rows
      } else {
        add(&l.gate_up_proj, {{p + "mlp.gate_proj.weight", {I, H}}, {p + "mlp.up_proj.weight", {I, H}}});
      }
      projection(t, &l.gate_up_proj_scale);
      add(&l.down_proj, {{p + "mlp.down_proj.weight", {H, I}}});
      projection(t, &l.down_proj_scale);
    }
  }
  add(&m.norm, {{"model.norm.weight", {H}}});
  if (!c.tie_word_embeddings) add(&m.lm_head, {{"lm_head.weight", {V, H}}});
}

// THUDM's ChatGLM layout (GLM-4); `canonical` names each tensor's parts as transformers' GlmForCausalLM has them.
void chatglm_sources(const ModelConfig& c, ModelWeights& m, std::vector<WeightSource>& t) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t q = c.q_size(), kv = c.kv_size();
  auto add = [&](TensorView* dst, std::vector<WeightSpec> parts, std::vector<WeightSpec> canonical = {}) {
    add_source(t, dst, std::move(parts), std::move(canonical));
  };
  auto lw = [&](int64_t i) -> LayerWeights& { return m.layers[static_cast<size_t>(i)]; };
  add(&m.embed_tokens, {{"transformer.embedding.word_embeddings.weight", {V, H}}},
      {{"model.embed_tokens.weight", {V, H}}});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "transformer.encoder.layers." + std::to_string(i) + ".";
    const std::string g = layer_prefix(i);
    LayerWeights& l = lw(i);
    add(&l.input_layernorm, {{p + "input_layernorm.weight", {H}}}, {{g + "input_layernorm.weight", {H}}});
    add(&l.qkv_proj, {{p + "self_attention.query_key_value.weight", {q + 2 * kv, H}}},
        {{g + "self_attn.q_proj.weight", {q, H}}, {g + "self_attn.k_proj.weight", {kv, H}},
         {g + "self_attn.v_proj.weight", {kv, H}}});
    projection(t, &l.qkv_proj_scale);
    if (c.attention_bias)
      add(&l.qkv_bias, {{p + "self_attention.query_key_value.bias", {q + 2 * kv}}},
          {{g + "self_attn.q_proj.bias", {q}}, {g + "self_attn.k_proj.bias", {kv}},
           {g + "self_attn.v_proj.bias", {kv}}});
    add(&l.o_proj, {{p + "self_attention.dense.weight", {H, q}}}, {{g + "self_attn.o_proj.weight", {H, q}}});
    projection(t, &l.o_proj_scale);
    add(&l.post_attention_layernorm, {{p + "post_attention_layernorm.weight", {H}}},
        {{g + "post_attention_layernorm.weight", {H}}});
    // dense_h_to_4h: gate rows then up rows (swiglu: silu(chunk 0) * chunk 1), as GLM's gate_up_proj.
    add(&l.gate_up_proj, {{p + "mlp.dense_h_to_4h.weight", {2 * I, H}}},
        {{g + "mlp.gate_up_proj.weight", {2 * I, H}}});
    projection(t, &l.gate_up_proj_scale);
    add(&l.down_proj, {{p + "mlp.dense_4h_to_h.weight", {H, I}}}, {{g + "mlp.down_proj.weight", {H, I}}});
    projection(t, &l.down_proj_scale);
  }
  add(&m.norm, {{"transformer.encoder.final_layernorm.weight", {H}}}, {{"model.norm.weight", {H}}});
  add(&m.lm_head, {{"transformer.output_layer.weight", {V, H}}}, {{"lm_head.weight", {V, H}}});
}

}  // namespace

std::vector<WeightSource> weight_sources(const ModelConfig& c, ModelWeights* w) {
  std::vector<WeightSource> t;
  ModelWeights scratch;  // the targets when the caller wants the table only
  ModelWeights& m = w ? *w : scratch;
  m.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  if (c.arch == Architecture::kChatGlm) {
    chatglm_sources(c, m, t);
  } else {
    hf_sources(c, m, t);
  }
  if (!w)
    for (WeightSource& src : t) src.target = src.scale_target = nullptr;
  return t;
}

bool is_fp8_checkpoint_part(const ModelConfig& cfg, const WeightSource& src, const WeightSpec& part) {
  return cfg.quantization.fp8() && src.quantizable && !cfg.quantization.keeps_unquantized(part.name);
}

std::vector<WeightSpec> weight_table(const ModelConfig& c) {
  std::vector<WeightSpec> t;
  for (WeightSource& s : weight_sources(c, nullptr))
    for (WeightSpec& p : s.parts) {
      const bool fp8 = is_fp8_checkpoint_part(c, s, p);
      t.push_back(p);
      if (fp8) t.push_back({fp8_scale_name(p.name), fp8_scale_shape(p.shape)});
    }
  return t;
}

bool is_ignored_checkpoint_tensor(const std::string& name, const ModelConfig& cfg) {
  // rotary_emb.inv_freq (HF), transformer.rotary_pos_emb.inv_freq (ChatGLM): RoPE buffers, recomputed.
  if (ends_with(name, "rotary_emb.inv_freq") || ends_with(name, "rotary_pos_emb.inv_freq")) return true;
  return cfg.tie_word_embeddings && name == "lm_head.weight";
}

namespace {

// Names, shapes and dtypes of `ckpt` against weight_table(cfg), before any copying: every tensor present with
// its shape, nothing unexpected; fp8 projections F8_E4M3 with F32 / BF16 / F16 scales, no other tensor fp8.
void validate_checkpoint(const SafetensorsCheckpoint& ckpt, const ModelConfig& cfg) {
  const std::filesystem::path& dir = ckpt.dir();
  const std::vector<WeightSpec> table = weight_table(cfg);
  std::map<std::string, Shape> expected;
  for (const WeightSpec& w : table) expected.emplace(w.name, w.shape);
  for (const WeightSpec& w : table) {
    NANOVLLM_CHECK(ckpt.has(w.name), "checkpoint ", dir.string(), " is missing tensor '", w.name,
                   "' (expected shape ", w.shape.str(), ", ", cfg.architecture_name,
                   ends_with(w.name, "_scale_inv") ? ": the block scales of an fp8 projection)" : ")");
    const TensorInfo& t = ckpt.info(w.name);
    NANOVLLM_CHECK(t.shape == w.shape, "tensor '", w.name, "' in ", t.file.string(), " has shape ", t.shape.str(),
                   ", expected ", w.shape.str(), " from config.json");
  }
  for (const WeightSource& src : weight_sources(cfg, nullptr))
    for (const WeightSpec& part : src.parts) {
      const TensorInfo& t = ckpt.info(part.name);
      if (!is_fp8_checkpoint_part(cfg, src, part)) {
        NANOVLLM_CHECK(t.dtype != DType::kF8E4M3, "tensor '", part.name, "' in ", t.file.string(),
                       " has dtype F8_E4M3, but ",
                       !cfg.quantization.fp8() ? "config.json has no block-scaled fp8 quantization_config"
                       : src.quantizable       ? "quantization_config's modules_to_not_convert lists it"
                                               : "only projection weights may be fp8 (embeddings, norms, the LM head "
                                                 "and the MoE router stay BF16 / F16 / F32)");
        continue;
      }
      NANOVLLM_CHECK(t.dtype == DType::kF8E4M3, "tensor '", part.name, "' in ", t.file.string(), " has dtype ",
                     dtype_name(t.dtype), ", but config.json's quantization_config makes it a block-scaled fp8 "
                     "projection (F8_E4M3); a checkpoint that keeps it unquantized lists it in modules_to_not_convert");
      const TensorInfo& scale = ckpt.info(fp8_scale_name(part.name));
      NANOVLLM_CHECK(scale.dtype == DType::kF32 || scale.dtype == DType::kBF16 || scale.dtype == DType::kF16,
                     "tensor '", fp8_scale_name(part.name), "' in ", scale.file.string(), " has dtype ",
                     dtype_name(scale.dtype), "; block scales must be F32, BF16 or F16");
    }
  for (const std::string& name : ckpt.names()) {
    if (expected.count(name) || is_ignored_checkpoint_tensor(name, cfg)) continue;
    NANOVLLM_FAIL("unexpected tensor '", name, "' in ", ckpt.info(name).file.string(), " (not part of ",
                  cfg.architecture_name, " with this config.json)");
  }
}

// Kept fp8: the block scales that go with `o` (a weight sliced by `slice`), or an error naming the tensor
// when its parts are not all fp8 or do not split into whole 128 x 128 blocks.
void plan_fp8_scales(const WeightSource& src, const ShardSlice& slice, OutputTensor& o) {
  int64_t rows = 0;
  for (size_t k = 0; k < o.parts.size(); ++k) {
    const bool fp8 = o.quantize || o.scales[k] != nullptr;
    NANOVLLM_CHECK(fp8, "fp8 weights: '", o.names[k], "' is kept unquantized but '", o.names.front(),
                   "' is fp8; the fused projection needs all its parts alike (run with --quantization none)");
    const Shape& sh = o.parts[k]->shape;
    NANOVLLM_CHECK(sh[0] % kFp8BlockSize == 0 && sh[1] % kFp8BlockSize == 0, "fp8 weights: '", o.names[k], "' is ",
                   sh.str(), "; the fp8 kernels need rows and columns in multiples of 128 (run with --quantization "
                   "none to dequantize it)");
    rows += sh[0] / kFp8BlockSize;
  }
  const int64_t cols = o.parts.front()->shape[1] / kFp8BlockSize;
  const ShardSlice blocks = fp8_block_slice(slice, src.parts.front().name);
  o.scale_target = src.scale_target;
  o.scale_runs = shard_runs(blocks, rows, cols);
  o.scale_shape = Shape{rows, cols};
  if (blocks.axis == ShardSlice::Axis::kRows) o.scale_shape.dims[0] = blocks.extent();
  if (blocks.axis == ShardSlice::Axis::kColumns) o.scale_shape.dims[1] = blocks.extent();
}

// Why kept-fp8 MoE experts must be dequantized instead, or "" when they can stay fp8: the fp8 expert kernels need
// every expert matrix, and this rank's share of it, in whole 128 x 128 blocks (Qwen3-30B-A3B's moe_intermediate_size
// 768 over 4 ranks is 192 columns each); the bf16 ones take any size, so such a model still runs.
std::string experts_off_the_fp8_grid(const ModelConfig& cfg, const TensorParallelPlan* shard) {
  const int64_t H = cfg.hidden_size, Im = cfg.moe.moe_intermediate_size;
  const int64_t share = shard != nullptr ? shard->moe_intermediate : Im;
  if (H % kFp8BlockSize != 0) return "hidden_size " + std::to_string(H) + " is not a multiple of 128";
  if (Im % kFp8BlockSize != 0) return "moe_intermediate_size " + std::to_string(Im) + " is not a multiple of 128";
  if (share % kFp8BlockSize != 0)
    return "each of the " + std::to_string(shard->size) + " tensor-parallel ranks holds " + std::to_string(share) +
           " of the experts' " + std::to_string(Im) + " intermediate columns, not a multiple of 128";
  return "";
}

// Layer tensors are named "<prefix><i>.": "model.layers." (HF), "transformer.encoder.layers." (ChatGLM).
const char* layer_tensor_prefix(const ModelConfig& cfg) {
  return cfg.arch == Architecture::kChatGlm ? "transformer.encoder.layers." : "model.layers.";
}

// The layers a checkpoint holds: 1 + the largest i of its layer tensors; 0 when it has none.
int64_t checkpoint_layers(const SafetensorsCheckpoint& ckpt, const std::string& prefix) {
  int64_t layers = 0;
  for (const std::string& name : ckpt.names()) {
    if (name.rfind(prefix, 0) != 0) continue;
    const size_t end = name.find_first_not_of("0123456789", prefix.size());
    if (end == prefix.size() || end == std::string::npos || end - prefix.size() > 9) continue;
    layers = std::max<int64_t>(layers, std::stoll(name.substr(prefix.size(), end - prefix.size())) + 1);
  }
  return layers;
}

}  // namespace

ModelWeights load_weights(const std::filesystem::path& dir, const ModelConfig& cfg, const WeightLoadOptions& opt) {
  NANOVLLM_CHECK(opt.allocator != nullptr, "load_weights: no allocator");
  NANOVLLM_CHECK(opt.upload || opt.allocator->device().is_cpu(), "load_weights: weights on ",
                 to_string(opt.allocator->device()), " need an upload function");
  if (opt.dtype) {
    const DType d = *opt.dtype;
    NANOVLLM_CHECK(d == DType::kF32 || d == DType::kBF16 || d == DType::kF16, "load_weights: cannot convert to ",
                   dtype_name(d), " (F32, BF16 or F16)");
  }
  const SafetensorsCheckpoint ckpt(dir);
  // Before the table, whose size follows num_hidden_layers.
  const std::string prefix = layer_tensor_prefix(cfg);
  const int64_t layers = checkpoint_layers(ckpt, prefix);
  NANOVLLM_CHECK(layers == cfg.num_hidden_layers, (dir / "config.json").string(), ": field 'num_hidden_layers' is ",
                 cfg.num_hidden_layers, " but the checkpoint in ", dir.string(), " holds ", layers, " layers: ",
                 "tensors '", prefix, std::min(layers, cfg.num_hidden_layers), ".*' are ",
                 layers < cfg.num_hidden_layers ? "missing" : "unexpected");

  validate_checkpoint(ckpt, cfg);

  ModelWeights w;
  std::vector<OutputTensor> outs;
  const std::string experts_dequantized = cfg.moe.num_experts > 0 ? experts_off_the_fp8_grid(cfg, opt.shard) : "";
  bool warned = false;
  for (const WeightSource& src : weight_sources(cfg, &w)) {
    OutputTensor o;
    o.target = src.target;
    o.stack = src.stack;
    o.quantize = opt.quantize_fp8 && src.quantizable && !cfg.quantization.fp8();
    bool any_fp8 = o.quantize;
    int64_t rows = 0;
    for (const WeightSpec& part : src.parts) {
      const bool fp8 = is_fp8_checkpoint_part(cfg, src, part);
      any_fp8 = any_fp8 || fp8;
      o.names.push_back(part.name);
      o.parts.push_back(&ckpt.info(part.name));
      o.scales.push_back(fp8 ? &ckpt.info(fp8_scale_name(part.name)) : nullptr);
      rows += o.parts.back()->shape[0];
    }
    o.shape = o.parts.front()->shape;
    o.shape.dims[0] = rows;  // the merged tensor [rows, cols] (or [rows])
    // Dequantized fp8 values are products in f32: F32 unless a dtype is asked for.
    o.dtype = opt.dtype.value_or(any_fp8 ? DType::kF32 : o.parts.front()->dtype);
    const int64_t cols = o.shape.ndim == 2 ? o.shape[1] : 1;
    const ShardSlice& slice = opt.shard ? slice_of(w, src.target, *opt.shard) : ShardSlice{};
    if (slice.axis == ShardSlice::Axis::kFirstRankOnly && opt.shard->rank != 0) continue;  // stays undefined
    o.runs = shard_runs(slice, rows, cols);
    if (slice.axis == ShardSlice::Axis::kRows) o.shape.dims[0] = slice.extent();
    if (slice.axis == ShardSlice::Axis::kColumns) {
      NANOVLLM_CHECK(o.shape.ndim == 2, "load_weights: a column split of the 1-D ", src.parts.front().name);
      o.shape.dims[1] = slice.extent();
    }
    const bool experts_fall_back = src.stack > 0 && !experts_dequantized.empty();
    if (opt.keep_fp8 && any_fp8 && src.scale_target != nullptr && !experts_fall_back) {
      o.dtype = DType::kF8E4M3;
      plan_fp8_scales(src, slice, o);
    }
    if (opt.keep_fp8 && any_fp8 && experts_fall_back && !warned && (!opt.shard || opt.shard->rank == 0)) {
      NANOVLLM_WARN("fp8 weights: the MoE experts are dequantized to ", dtype_name(o.dtype), " at load (the fp8 ",
                    "expert kernels need whole 128 x 128 blocks: ", experts_dequantized, "); the rest stays fp8");
      warned = true;
    }
    outs.push_back(std::move(o));
  }
  // One arena, every tensor 256-byte aligned (what vectorised kernels and cuBLASLt like).
  constexpr size_t kAlign = 256;
  size_t total = 0;
  auto take = [&total](size_t bytes) {
    const size_t at = total;
    total += (bytes + kAlign - 1) / kAlign * kAlign;
    return at;
  };
  for (OutputTensor& o : outs) {
    o.offset = take(static_cast<size_t>(o.shape.numel()) * dtype_size(o.dtype));
    if (o.scale_target) o.scale_offset = take(static_cast<size_t>(o.scale_shape.numel()) * 4);
  }
  // Host allocators may align less than kAlign: over-allocate and align the base.
  w.storage.emplace_back(*opt.allocator, total + kAlign);
  const uintptr_t raw = reinterpret_cast<uintptr_t>(w.storage.back().data());
  char* base = static_cast<char*>(w.storage.back().data()) + ((kAlign - raw % kAlign) % kAlign);
  const Device device = opt.allocator->device();
  Loader loader(opt);
  for (const OutputTensor& o : outs) {
    loader.load(o, base);
    *o.target = TensorView(base + o.offset, o.dtype, o.shape, device);
    if (o.stack > 0) *o.target = o.target->reshape({o.stack, o.shape[0] / o.stack, o.shape[1]});
    if (o.scale_target) {
      *o.scale_target = TensorView(base + o.scale_offset, DType::kF32, o.scale_shape, device);
      if (o.stack > 0)
        *o.scale_target = o.scale_target->reshape({o.stack, o.scale_shape[0] / o.stack, o.scale_shape[1]});
    }
  }
  if (cfg.tie_word_embeddings) w.lm_head = w.embed_tokens;
  NANOVLLM_DEBUG("loaded ", outs.size(), " weight tensors (", total >> 20, " MiB) from ", dir.string(),
                 opt.shard ? " (one rank's slices)" : "");
  return w;
}

}  // namespace nanovllm
