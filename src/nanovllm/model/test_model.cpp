#include "nanovllm/model/test_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>

#include "nanovllm/core/dtype.h"
#include "nanovllm/core/error.h"
#include "nanovllm/kernels/fp8_block.h"
#include "nanovllm/model/config.h"
#include "nanovllm/model/safetensors.h"
#include "nanovllm/model/weights.h"

namespace nanovllm {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json qwen3_config(int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv_heads, int64_t vocab,
                  bool tied, int64_t bos, int64_t eos) {
  // Key layout of the hub's Qwen/Qwen3-*/config.json.
  return json{{"architectures", json::array({"Qwen3ForCausalLM"})},
              {"attention_bias", false},
              {"attention_dropout", 0.0},
              {"bos_token_id", bos},
              {"eos_token_id", eos},
              {"head_dim", hidden >= 1024 ? 128 : hidden / heads},
              {"hidden_act", "silu"},
              {"hidden_size", hidden},
              {"initializer_range", 0.02},
              {"intermediate_size", inter},
              {"max_position_embeddings", 40960},
              {"max_window_layers", layers},
              {"model_type", "qwen3"},
              {"num_attention_heads", heads},
              {"num_hidden_layers", layers},
              {"num_key_value_heads", kv_heads},
              {"rms_norm_eps", 1e-06},
              {"rope_scaling", nullptr},
              {"rope_theta", 1000000},
              {"sliding_window", nullptr},
              {"tie_word_embeddings", tied},
              {"torch_dtype", "bfloat16"},
              {"transformers_version", "4.51.0"},
              {"use_cache", true},
              {"use_sliding_window", false},
              {"vocab_size", vocab}};
}

// Key layout of the hub's Qwen/Qwen3-30B-A3B/config.json: Qwen3's fields plus the mixture-of-experts ones.
json qwen3_moe_config(int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv_heads, int64_t vocab,
                      int64_t experts, int64_t top_k, int64_t moe_inter, int64_t sparse_step,
                      std::vector<int64_t> mlp_only, int64_t bos, int64_t eos) {
  json c = qwen3_config(hidden, inter, layers, heads, kv_heads, vocab, false, bos, eos);
  c["architectures"] = json::array({"Qwen3MoeForCausalLM"});
  c["model_type"] = "qwen3_moe";
  c["decoder_sparse_step"] = sparse_step;
  c["mlp_only_layers"] = mlp_only;
  c["moe_intermediate_size"] = moe_inter;
  c["norm_topk_prob"] = true;
  c["num_experts"] = experts;
  c["num_experts_per_tok"] = top_k;
  c["output_router_logits"] = false;
  c["router_aux_loss_coef"] = 0.001;
  return c;
}

json qwen2_config(int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv_heads, int64_t vocab,
                  int64_t max_pos, double rope_theta, double eps, bool tied, int64_t bos, int64_t eos) {
  // Key layout of the hub's Qwen/Qwen2.5-*/config.json.
  return json{{"architectures", json::array({"Qwen2ForCausalLM"})},
              {"attention_dropout", 0.0},
              {"bos_token_id", bos},
              {"eos_token_id", eos},
              {"hidden_act", "silu"},
              {"hidden_size", hidden},
              {"initializer_range", 0.02},
              {"intermediate_size", inter},
              {"max_position_embeddings", max_pos},
              {"max_window_layers", layers},
              {"model_type", "qwen2"},
              {"num_attention_heads", heads},
              {"num_hidden_layers", layers},
              {"num_key_value_heads", kv_heads},
              {"rms_norm_eps", eps},
              {"rope_theta", rope_theta},
              {"sliding_window", 32768},
              {"tie_word_embeddings", tied},
              {"torch_dtype", "bfloat16"},
              {"transformers_version", "4.43.1"},
              {"use_cache", true},
              {"use_sliding_window", false},
              {"vocab_size", vocab}};
}

json glm_config(int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim,
                int64_t vocab, int64_t max_pos, double rope_theta, double eps, json eos, int64_t pad) {
  // Key layout of the hub's THUDM/glm-4-9b-chat-1m-hf/config.json (transformers' GlmForCausalLM).
  return json{{"architectures", json::array({"GlmForCausalLM"})},
              {"attention_bias", true},
              {"attention_dropout", 0.0},
              {"eos_token_id", std::move(eos)},
              {"head_dim", head_dim},
              {"hidden_act", "silu"},
              {"hidden_size", hidden},
              {"initializer_range", 0.02},
              {"intermediate_size", inter},
              {"max_position_embeddings", max_pos},
              {"model_type", "glm"},
              {"num_attention_heads", heads},
              {"num_hidden_layers", layers},
              {"num_key_value_heads", kv_heads},
              {"pad_token_id", pad},
              {"partial_rotary_factor", 0.5},
              {"rms_norm_eps", eps},
              {"rope_theta", rope_theta},
              {"tie_word_embeddings", false},
              {"torch_dtype", "bfloat16"},
              {"transformers_version", "4.46.0"},
              {"use_cache", true},
              {"vocab_size", vocab}};
}

// ---- counter-based RNG: value = f(seed, tensor name, element index) ----------------------------------

uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t name_hash(const std::string& s) {  // FNV-1a
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

enum class Init { kNormal, kUniformNorm };

// A run of a tensor's elements drawn from one key: a whole checkpoint tensor, or one of the transformers-
// native tensors a ChatGLM tensor fuses (query_key_value = q_proj, k_proj, v_proj rows).
struct Segment {
  Init init = Init::kNormal;
  float scale = 1.0f;  // normal: standard deviation
  uint64_t key = 0;
  uint64_t numel = 0;
};

// What a checkpoint tensor holds: its values in bf16; or, for a block-scaled fp8 projection, the e4m3 codes
// or the f32 block scales of those bf16 values quantized per 128 x 128 block (quantize_fp8_blocks).
enum class Content { kBf16, kFp8Codes, kFp8Scales };

struct TensorPlan {
  std::string name;
  Shape shape;
  std::vector<Segment> segments;  // in row order, covering the tensor (fp8: the values' [R, C])
  Content content = Content::kBf16;
  Shape values_shape;  // fp8 codes and scales: the weight's [R, C]
  size_t offset = 0;   // into its shard's data section
  int shard = 0;
  DType dtype() const {
    return content == Content::kBf16 ? DType::kBF16 : content == Content::kFp8Codes ? DType::kF8E4M3 : DType::kF32;
  }
  size_t nbytes() const { return static_cast<size_t>(shape.numel()) * dtype_size(dtype()); }
  // Elements of one work item are whole multiples of this (fp8: bands of 128 rows are quantized together).
  uint64_t unit() const {
    if (content == Content::kBf16) return 1;
    const uint64_t cols = static_cast<uint64_t>(values_shape[1]);
    return content == Content::kFp8Codes ? cols * kFp8BlockSize : static_cast<uint64_t>(fp8_blocks(values_shape[1]));
  }
};

// Element pair j (elements 2j, 2j+1) comes from one 64-bit draw through Box-Muller.
void normal_pair(uint64_t key, uint64_t j, float& z0, float& z1) {
  const uint64_t r = mix64(key + (j + 1) * 0x9e3779b97f4a7c15ull);
  const float u1 = (static_cast<float>(r >> 40) + 0.5f) * (1.0f / 16777216.0f);  // (0, 1)
  const float u2 = static_cast<float>((r >> 8) & 0xffffffu) * (1.0f / 16777216.0f);
  const float rad = std::sqrt(-2.0f * std::log(u1));
  const float th = 6.2831853071795864f * u2;
  z0 = rad * std::cos(th);
  z1 = rad * std::sin(th);
}

// Fills elements [begin, begin + count) of segment `t` as bf16.
void fill_segment(const Segment& t, uint64_t begin, uint64_t count, uint16_t* out) {
  if (t.init == Init::kUniformNorm) {
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t r = mix64(t.key + (begin + i + 1) * 0x9e3779b97f4a7c15ull);
      const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
      out[i] = f32_to_bf16(1.0f + 0.2f * (2.0f * u - 1.0f));
    }
    return;
  }
  uint64_t i = 0;
  float z0, z1;
  if (begin % 2 == 1 && count > 0) {  // odd start: second half of a pair
    normal_pair(t.key, begin / 2, z0, z1);
    out[i++] = f32_to_bf16(z1 * t.scale);
  }
  for (; i + 1 < count; i += 2) {
    normal_pair(t.key, (begin + i) / 2, z0, z1);
    out[i] = f32_to_bf16(z0 * t.scale);
    out[i + 1] = f32_to_bf16(z1 * t.scale);
  }
  if (i < count) {
    normal_pair(t.key, (begin + i) / 2, z0, z1);
    out[i] = f32_to_bf16(z0 * t.scale);
  }
}

// Fills elements [begin, begin + count) of the values of `segments` as bf16, segment by segment.
void fill_values(const std::vector<Segment>& segments, uint64_t begin, uint64_t count, uint16_t* out) {
  uint64_t seg_begin = 0;
  for (const Segment& seg : segments) {
    const uint64_t lo = std::max(begin, seg_begin), hi = std::min(begin + count, seg_begin + seg.numel);
    if (lo < hi) fill_segment(seg, lo - seg_begin, hi - lo, out + (lo - begin));
    seg_begin += seg.numel;
  }
}

// Quantizes band `band` (128 rows) of an fp8 tensor's values: its codes into `codes` (may be null) and its
// row of block scales into `scales`.
void quantize_band(const TensorPlan& t, uint64_t band, uint8_t* codes, float* scales) {
  const uint64_t rows = static_cast<uint64_t>(t.values_shape[0]), cols = static_cast<uint64_t>(t.values_shape[1]);
  const uint64_t r0 = band * kFp8BlockSize, n = std::min<uint64_t>(kFp8BlockSize, rows - r0);
  std::vector<uint16_t> bf16(n * cols);
  fill_values(t.segments, r0 * cols, n * cols, bf16.data());
  std::vector<float> values(n * cols);
  for (size_t i = 0; i < values.size(); ++i) values[i] = bf16_to_f32(bf16[i]);
  std::vector<uint8_t> scratch(codes ? 0 : n * cols);
  quantize_fp8_blocks(values.data(), static_cast<int64_t>(n), static_cast<int64_t>(cols),
                      codes ? codes : scratch.data(), scales);
}

// Fills elements [begin, begin + count) of tensor `t` (whole units, but for the tensor's tail) into `out`.
void fill(const TensorPlan& t, uint64_t begin, uint64_t count, char* out) {
  switch (t.content) {
    case Content::kBf16: {
      if (reinterpret_cast<uintptr_t>(out) % 2 == 0) {
        fill_values(t.segments, begin, count, reinterpret_cast<uint16_t*>(out));
        return;
      }
      std::vector<uint16_t> values(count);  // behind an fp8 tensor of odd size: unaligned
      fill_values(t.segments, begin, count, values.data());
      std::memcpy(out, values.data(), count * 2);
      return;
    }
    case Content::kFp8Codes: {
      const uint64_t band = t.unit(), bands = (count + band - 1) / band;
      std::vector<float> scales(static_cast<size_t>(fp8_blocks(t.values_shape[1])));
      for (uint64_t b = 0; b < bands; ++b)
        quantize_band(t, begin / band + b, reinterpret_cast<uint8_t*>(out) + b * band, scales.data());
      return;
    }
    case Content::kFp8Scales: {
      std::vector<float> scales(t.unit());
      for (uint64_t b = 0; b < count / t.unit(); ++b) {
        quantize_band(t, begin / t.unit() + b, nullptr, scales.data());
        std::memcpy(out + b * t.unit() * 4, scales.data(), scales.size() * 4);  // `out` may be unaligned
      }
      return;
    }
  }
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The values of a checkpoint tensor named `w.name` (in transformers-native naming).
Segment plan_segment(const WeightSpec& w, uint64_t seed) {
  Segment t;
  t.numel = static_cast<uint64_t>(w.shape.numel());
  t.key = mix64(seed ^ mix64(name_hash(w.name)));
  if (ends_with(w.name, "norm.weight")) {  // input/post_attention layernorm, q/k norm, final norm
    t.init = Init::kUniformNorm;
  } else if (ends_with(w.name, ".bias")) {
    t.scale = 0.02f;
  } else if (w.name == "model.embed_tokens.weight") {
    t.scale = 1.0f;
  } else {  // linear weights [out, in], lm_head included
    t.scale = 1.0f / std::sqrt(static_cast<float>(w.shape[1]));
  }
  return t;
}

// The checkpoint tensors of one engine tensor. A single part holds the canonical tensors' values in row
// order (so a ChatGLM checkpoint equals the transformers-native one of the same seed); several parts are
// the canonical tensors themselves.
// A block-scaled fp8 checkpoint (`cfg`'s quantization_config) holds a projection part as its codes, followed
// by its block scales (both from the same bf16 values).
void plan_source(const ModelConfig& cfg, const WeightSource& src, uint64_t seed, std::vector<TensorPlan>& plan) {
  auto add = [&](const WeightSpec& part, std::vector<Segment> segments) {
    if (!is_fp8_checkpoint_part(cfg, src, part)) {
      plan.push_back({part.name, part.shape, std::move(segments), Content::kBf16, Shape{}});
      return;
    }
    plan.push_back({part.name, part.shape, segments, Content::kFp8Codes, part.shape});
    plan.push_back({fp8_scale_name(part.name), fp8_scale_shape(part.shape), std::move(segments), Content::kFp8Scales,
                    part.shape});
  };
  if (src.parts.size() == 1) {
    std::vector<Segment> segments;
    uint64_t total = 0;
    for (const WeightSpec& c : src.canonical) {
      segments.push_back(plan_segment(c, seed));
      total += segments.back().numel;
    }
    NANOVLLM_CHECK(total == static_cast<uint64_t>(src.parts[0].shape.numel()), "test model: ", src.parts[0].name,
                   " does not match its canonical tensors");
    add(src.parts[0], std::move(segments));
    return;
  }
  for (const WeightSpec& p : src.parts) add(p, {plan_segment(p, seed)});
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  NANOVLLM_CHECK(out.good(), "cannot write ", path.string());
  out << text;
  NANOVLLM_CHECK(out.good(), "error writing ", path.string());
}

std::string shard_name(int i, int n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05d-of-%05d.safetensors", i + 1, n);
  return buf;
}

// One shard: header, then every tensor's data, generated in parallel in batches and written in order (the
// write of batch b overlaps the generation of batch b + 1).
void write_shard(const fs::path& path, const std::vector<const TensorPlan*>& tensors, int num_threads) {
  json header = json::object();
  header["__metadata__"] = json{{"format", "pt"}};
  for (const TensorPlan* t : tensors) {
    json shape = json::array();
    for (int d = 0; d < t->shape.ndim; ++d) shape.push_back(t->shape[d]);
    header[t->name] = json{{"dtype", std::string(dtype_name(t->dtype()))}, {"shape", shape},
                           {"data_offsets", {t->offset, t->offset + t->nbytes()}}};
  }
  std::ofstream out = begin_safetensors_file(path, header.dump());

  // Work items: about kChunk elements (whole units) of one tensor, in file order; fp8 scales one band each.
  struct Item { const TensorPlan* t; uint64_t begin, count; size_t batch_offset; };
  constexpr uint64_t kChunk = uint64_t{1} << 21;        // elements (4 MiB bf16)
  constexpr size_t kBatchBytes = size_t{256} << 20;     // per batch buffer
  std::vector<std::vector<Item>> batches(1);
  size_t batch_fill = 0;
  for (const TensorPlan* t : tensors) {
    const uint64_t n = static_cast<uint64_t>(t->shape.numel()), esz = dtype_size(t->dtype());
    const uint64_t chunk = t->content == Content::kFp8Scales ? t->unit() : std::max<uint64_t>(1, kChunk / t->unit()) * t->unit();
    for (uint64_t b = 0; b < n; b += chunk) {
      const uint64_t c = std::min(chunk, n - b);
      if (batch_fill + c * esz > kBatchBytes && !batches.back().empty()) {
        batches.emplace_back();
        batch_fill = 0;
      }
      batches.back().push_back({t, b, c, batch_fill});
      batch_fill += c * esz;
    }
  }
  std::vector<char> buf[2];
  std::future<void> writing;
  for (size_t b = 0; b < batches.size(); ++b) {
    const std::vector<Item>& items = batches[b];
    std::vector<char>& dst = buf[b % 2];
    // Only batch b - 1's write is in flight here, and it reads the other buffer.
    const size_t bytes =
        items.empty() ? 0 : items.back().batch_offset + items.back().count * dtype_size(items.back().t->dtype());
    dst.resize(bytes);
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t k; (k = next.fetch_add(1)) < items.size();)
        fill(*items[k].t, items[k].begin, items[k].count, dst.data() + items[k].batch_offset);
    };
    const int t = static_cast<int>(std::min<size_t>(static_cast<size_t>(num_threads), items.size()));
    std::vector<std::thread> pool;
    for (int i = 1; i < t; ++i) pool.emplace_back(worker);
    worker();
    for (auto& th : pool) th.join();
    if (writing.valid()) writing.get();  // at most one write in flight; rethrows its error
    writing = std::async(std::launch::async, [&out, &dst, bytes] {
      out.write(reinterpret_cast<const char*>(dst.data()), static_cast<std::streamsize>(bytes));
    });
  }
  if (writing.valid()) writing.get();
  out.close();
  NANOVLLM_CHECK(!out.fail(), "error writing ", path.string(), " (disk full?)");
}

}  // namespace

json fp8_quantization_config() {
  return json{{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
              {"weight_block_size", {kFp8BlockSize, kFp8BlockSize}}};
}

std::vector<std::string> test_model_presets() {
  return {"tiny",          "qwen3-0.6b", "qwen3-4b",  "qwen3-8b", "qwen3-moe-tiny", "qwen3-30b-a3b",
          "qwen3-235b-a22b", "glm4-tiny",  "glm4-9b",   "dca-tiny", "qwen2.5-7b-1m"};
}

json test_model_config(const std::string& preset) {
  if (preset == "tiny") return qwen3_config(64, 128, 2, 4, 2, 512, true, 1, 2);
  if (preset == "qwen3-0.6b") return qwen3_config(1024, 3072, 28, 16, 8, 151936, true, 151643, 151645);
  if (preset == "qwen3-4b") return qwen3_config(2560, 9728, 36, 32, 8, 151936, true, 151643, 151645);
  if (preset == "qwen3-8b") return qwen3_config(4096, 12288, 36, 32, 8, 151936, false, 151643, 151645);
  // Qwen3-MoE: a 6-layer model with 8 experts, top-2, where decoder_sparse_step 2 makes layers 1, 3, 5 sparse
  // and mlp_only_layers takes layer 3 back to the dense MLP (MoE layers 1 and 5); and the real shapes
  // (Qwen3-30B-A3B, Qwen3-235B-A22B: 128 experts, top-8, every layer sparse).
  if (preset == "qwen3-moe-tiny") return qwen3_moe_config(64, 128, 6, 4, 2, 512, 8, 2, 32, 2, {3}, 1, 2);
  if (preset == "qwen3-30b-a3b")
    return qwen3_moe_config(2048, 6144, 48, 32, 4, 151936, 128, 8, 768, 1, {}, 151643, 151645);
  if (preset == "qwen3-235b-a22b")
    return qwen3_moe_config(4096, 12288, 94, 64, 4, 151936, 128, 8, 1536, 1, {}, 151643, 151645);
  // GLM-4: a 2-layer model with the real one's EOS list shape (ids 2, 3, 4), and GLM-4-9B-Chat-1M
  // (multi_query_group_num 4; glm-4-9b-chat has 2; rope_theta = 10000 * rope_ratio 10000).
  if (preset == "glm4-tiny") return glm_config(64, 128, 2, 4, 2, 32, 512, 4096, 10000.0, 1e-5, {2, 3, 4}, 2);
  if (preset == "glm4-9b")
    return glm_config(4096, 13696, 40, 32, 4, 128, 151552, 1048576, 1e8, 1.5625e-07, {151329, 151336, 151338},
                      151329);
  // Dual Chunk Attention (docs/dual_chunk_attention.md): a 2-layer Qwen2 whose chunks are 48 positions
  // (chunk_size 64, local_size 16) and whose logits scale past 96 tokens, and Qwen/Qwen2.5-7B-Instruct-1M's config.
  if (preset == "dca-tiny") {
    json c = qwen2_config(64, 128, 2, 4, 2, 512, 4096, 10000.0, 1e-6, true, 1, 2);
    c["dual_chunk_attention_config"] = {{"chunk_size", 64}, {"local_size", 16}, {"original_max_position_embeddings", 96}};
    return c;
  }
  if (preset == "qwen2.5-7b-1m") {
    json c = qwen2_config(3584, 18944, 28, 28, 4, 152064, 1010000, 1e7, 1e-5, false, 151643, 151645);
    c["dual_chunk_attention_config"] = {
        {"chunk_size", 262144}, {"local_size", 8192}, {"original_max_position_embeddings", 262144}};
    return c;
  }
  std::string names;
  for (const std::string& p : test_model_presets()) names += (names.empty() ? "" : ", ") + p;
  NANOVLLM_FAIL("unknown test model preset '", preset, "' (choose ", names, ")");
}

json chatglm_test_model_config(const json& glm) {
  const ModelConfig c = ModelConfig::from_json_text(glm.dump(), "config.json (test model)");
  NANOVLLM_CHECK(c.arch == Architecture::kGlm, "the ChatGLM layout needs a GlmForCausalLM config (a glm4-* preset), "
                 "got ", c.architecture_name);
  NANOVLLM_CHECK(c.rotary_dim * 2 == c.head_dim, "the ChatGLM layout rotates exactly half of each head: "
                 "partial_rotary_factor must be 0.5");
  NANOVLLM_CHECK(c.rope_scaling.type == RopeScaling::Type::kNone, "the ChatGLM layout has no rope_scaling");
  NANOVLLM_CHECK(!c.tie_word_embeddings, "the ChatGLM layout has no tied embeddings");
  // Key layout of the hub's THUDM/glm-4-9b-chat-1m/config.json.
  json out{{"architectures", json::array({"ChatGLMModel"})},
           {"model_type", "chatglm"},
           {"add_bias_linear", false},
           {"add_qkv_bias", c.attention_bias},
           {"apply_query_key_layer_scaling", true},
           {"apply_residual_connection_post_layernorm", false},
           {"attention_dropout", 0.0},
           {"attention_softmax_in_fp32", true},
           {"bias_dropout_fusion", true},
           {"ffn_hidden_size", c.intermediate_size},
           {"fp32_residual_connection", false},
           {"hidden_dropout", 0.0},
           {"hidden_size", c.hidden_size},
           {"kv_channels", c.head_dim},
           {"layernorm_epsilon", c.rms_norm_eps},
           {"multi_query_attention", true},
           {"multi_query_group_num", c.num_key_value_heads},
           {"num_attention_heads", c.num_attention_heads},
           {"num_layers", c.num_hidden_layers},
           {"original_rope", true},
           {"padded_vocab_size", c.vocab_size},
           {"post_layer_norm", true},
           {"rmsnorm", true},
           {"rope_ratio", c.rope_theta / 10000.0},
           {"seq_length", c.max_position_embeddings},
           {"tie_word_embeddings", false},
           {"torch_dtype", "bfloat16"},
           {"transformers_version", "4.44.0"},
           {"use_cache", true}};
  for (const char* key : {"eos_token_id", "pad_token_id"})
    if (glm.contains(key)) out[key] = glm[key];
  return out;
}

void write_test_model(const fs::path& out_dir, const json& config, uint64_t seed, int64_t shard_max_bytes,
                      int num_threads) {
  const std::string config_text = config.dump(2) + "\n";
  const ModelConfig cfg = ModelConfig::from_json_text(config_text, "config.json (test model)");
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  NANOVLLM_CHECK(fs::is_directory(out_dir), "cannot create directory ", out_dir.string(), ": ", ec.message());
  // Stale weights from an earlier write would shadow or contradict the new ones.
  for (const auto& e : fs::directory_iterator(out_dir)) {
    const std::string n = e.path().filename().string();
    if (n == "model.safetensors" || n == "model.safetensors.index.json" ||
        (n.rfind("model-", 0) == 0 && ends_with(n, ".safetensors")))
      fs::remove(e.path());
  }

  write_text(out_dir / "config.json", config_text);
  json gen{{"transformers_version", "4.51.0"}};
  if (config.contains("bos_token_id")) gen["bos_token_id"] = config["bos_token_id"];
  if (config.contains("eos_token_id")) gen["eos_token_id"] = config["eos_token_id"];
  write_text(out_dir / "generation_config.json", gen.dump(2) + "\n");

  std::vector<TensorPlan> plan;
  for (const WeightSource& src : weight_sources(cfg)) plan_source(cfg, src, seed, plan);

  // Assign shards: a new shard when the current one is non-empty and would grow past the limit.
  int num_shards = 1;
  size_t fill = 0;
  for (TensorPlan& t : plan) {
    if (shard_max_bytes > 0 && fill > 0 && fill + t.nbytes() > static_cast<size_t>(shard_max_bytes)) {
      ++num_shards;
      fill = 0;
    }
    t.shard = num_shards - 1;
    t.offset = fill;
    fill += t.nbytes();
  }
  std::vector<std::vector<const TensorPlan*>> shards(static_cast<size_t>(num_shards));
  for (const TensorPlan& t : plan) shards[static_cast<size_t>(t.shard)].push_back(&t);

  if (shard_max_bytes <= 0) {
    write_shard(out_dir / "model.safetensors", shards[0], num_threads);
    return;
  }
  json weight_map = json::object();
  size_t total = 0;
  for (const TensorPlan& t : plan) {
    weight_map[t.name] = shard_name(t.shard, num_shards);
    total += t.nbytes();
  }
  for (int s = 0; s < num_shards; ++s)
    write_shard(out_dir / shard_name(s, num_shards), shards[static_cast<size_t>(s)], num_threads);
  write_text(out_dir / "model.safetensors.index.json",
             json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n");
}

}  // namespace nanovllm
