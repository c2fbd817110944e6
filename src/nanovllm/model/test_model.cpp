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

struct TensorPlan {
  std::string name;
  Shape shape;
  Init init = Init::kNormal;
  float scale = 1.0f;  // normal: standard deviation
  uint64_t key = 0;
  size_t offset = 0;   // into its shard's data section
  int shard = 0;
  size_t nbytes() const { return static_cast<size_t>(shape.numel()) * 2; }
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

// Fills elements [begin, begin + count) of tensor `t` as bf16.
void fill(const TensorPlan& t, uint64_t begin, uint64_t count, uint16_t* out) {
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

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

TensorPlan plan_tensor(const WeightSpec& w, uint64_t seed) {
  TensorPlan t;
  t.name = w.name;
  t.shape = w.shape;
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
    header[t->name] = json{{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {t->offset, t->offset + t->nbytes()}}};
  }
  std::ofstream out = begin_safetensors_file(path, header.dump());

  // Work items: at most kChunk elements of one tensor, in file order.
  struct Item { const TensorPlan* t; uint64_t begin, count; size_t batch_offset; };
  constexpr uint64_t kChunk = uint64_t{1} << 21;        // elements (4 MiB bf16)
  constexpr size_t kBatchBytes = size_t{256} << 20;     // per batch buffer
  std::vector<std::vector<Item>> batches(1);
  size_t batch_fill = 0;
  for (const TensorPlan* t : tensors) {
    const uint64_t n = static_cast<uint64_t>(t->shape.numel());
    for (uint64_t b = 0; b < n; b += kChunk) {
      const uint64_t c = std::min(kChunk, n - b);
      if (batch_fill + c * 2 > kBatchBytes && !batches.back().empty()) {
        batches.emplace_back();
        batch_fill = 0;
      }
      batches.back().push_back({t, b, c, batch_fill});
      batch_fill += c * 2;
    }
  }
  std::vector<uint16_t> buf[2];
  std::future<void> writing;
  for (size_t b = 0; b < batches.size(); ++b) {
    const std::vector<Item>& items = batches[b];
    std::vector<uint16_t>& dst = buf[b % 2];
    // Only batch b - 1's write is in flight here, and it reads the other buffer.
    const size_t bytes = items.empty() ? 0 : items.back().batch_offset + items.back().count * 2;
    dst.resize(bytes / 2);
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t k; (k = next.fetch_add(1)) < items.size();)
        fill(*items[k].t, items[k].begin, items[k].count, dst.data() + items[k].batch_offset / 2);
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

std::vector<std::string> test_model_presets() { return {"tiny", "qwen3-0.6b", "qwen3-4b", "qwen3-8b"}; }

json test_model_config(const std::string& preset) {
  if (preset == "tiny") return qwen3_config(64, 128, 2, 4, 2, 512, true, 1, 2);
  if (preset == "qwen3-0.6b") return qwen3_config(1024, 3072, 28, 16, 8, 151936, true, 151643, 151645);
  if (preset == "qwen3-4b") return qwen3_config(2560, 9728, 36, 32, 8, 151936, true, 151643, 151645);
  if (preset == "qwen3-8b") return qwen3_config(4096, 12288, 36, 32, 8, 151936, false, 151643, 151645);
  NANOVLLM_FAIL("unknown test model preset '", preset, "' (choose tiny, qwen3-0.6b, qwen3-4b, qwen3-8b)");
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
  for (const WeightSpec& w : weight_table(cfg)) plan.push_back(plan_tensor(w, seed));

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
