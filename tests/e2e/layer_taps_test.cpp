// Layer taps on the CPU backend: names and shapes, values against a recomputation of each layer from
// the ops' CPU reference (not from the tap code), the paged and offload paths giving identical taps, the
// `--dump-taps` CLI, and scripts/compare_taps.py naming the layer and tap of a deliberately broken op.
#include <gtest/gtest.h>


#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "nanovllm/kernels/ops.h"
#include "nanovllm/llm/llm.h"
#include "nanovllm/model/layer_taps.h"
#include "nanovllm/model/rope.h"
#include "nanovllm/model/safetensors.h"
#include "nanovllm/model/weights.h"
#include "support/process_scratch_dir.h"
#include "support/run_command.h"
#include "support/test_models.h"

namespace nanovllm {
namespace {

constexpr int64_t kLayers = 3;

std::filesystem::path model_dir() { return testing::tiny_model_dir("taps", {{"num_hidden_layers", kLayers}}, 29); }

EngineConfig cpu_config() {
  EngineConfig ec;
  ec.model.path = model_dir();
  ec.model.backend = Backend::kCpu;
  ec.cache.block_size = 8;
  ec.model.max_model_len = 128;
  ec.scheduler.max_num_batched_tokens = 128;
  return ec;
}

EngineConfig offload_config() {
  EngineConfig ec = cpu_config();
  ec.offload.enabled = true;
  ec.offload.min_tokens = 1;  // every request takes the offload path
  ec.offload.block_size = 8;
  ec.offload.num_kv_buffers = 2;
  return ec;
}

using testing::greedy;

const std::vector<int32_t> kPrompt = testing::random_prompts({19}, 512, 7)[0];
constexpr int64_t kMaxTokens = 6;
constexpr int64_t kRows = 19 + kMaxTokens - 1;  // the last sampled token never enters the model

// Runs the prompt with `taps` attached and returns the generated tokens.
std::vector<int32_t> run_tapped(const EngineConfig& ec, LayerTaps& taps) {
  LLM llm(ec);
  llm.engine().set_layer_taps(&taps);
  return llm.generate({kPrompt}, greedy(kMaxTokens)).at(0).token_ids;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(double{a[i]} - double{b[i]}));
  return d;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, std::abs(double{x}));
  return m;
}

const TapRecorder::Tap& tap_of(const TapRecorder& r, int64_t layer, TapPoint p) {
  const auto it = r.taps().find({layer, p});
  EXPECT_NE(it, r.taps().end()) << "layer " << layer << " " << tap_name(p);
  static const TapRecorder::Tap kEmpty;
  return it == r.taps().end() ? kEmpty : it->second;
}

TEST(LayerTaps, EveryLayerAndPointWithItsShape) {
  TapRecorder taps;
  run_tapped(cpu_config(), taps);
  const ModelConfig c = ModelConfig::from_model_dir(model_dir());
  EXPECT_EQ(taps.taps().size(), static_cast<size_t>(kLayers) * kTapPoints.size());
  EXPECT_EQ(taps.rows(), kRows);
  for (int64_t l = 0; l < kLayers; ++l) {
    EXPECT_EQ(tap_of(taps, l, TapPoint::kInput).row_shape, (Shape{c.hidden_size}));
    EXPECT_EQ(tap_of(taps, l, TapPoint::kQ).row_shape, (Shape{c.num_attention_heads, c.head_dim}));
    EXPECT_EQ(tap_of(taps, l, TapPoint::kK).row_shape, (Shape{c.num_key_value_heads, c.head_dim}));
    EXPECT_EQ(tap_of(taps, l, TapPoint::kV).row_shape, (Shape{c.num_key_value_heads, c.head_dim}));
    EXPECT_EQ(tap_of(taps, l, TapPoint::kAttn).row_shape, (Shape{c.num_attention_heads, c.head_dim}));
    EXPECT_EQ(tap_of(taps, l, TapPoint::kOutput).row_shape, (Shape{c.hidden_size}));
    for (TapPoint p : kTapPoints) EXPECT_GT(max_abs(tap_of(taps, l, p).values), 0.1) << l << tap_name(p);
  }
  TapRecorder some({2, 0});
  run_tapped(cpu_config(), some);
  EXPECT_EQ(some.taps().size(), 2 * kTapPoints.size());
  EXPECT_EQ(some.taps().count({1, TapPoint::kInput}), 0u);
  EXPECT_EQ(max_abs_diff(tap_of(some, 2, TapPoint::kOutput).values, tap_of(taps, 2, TapPoint::kOutput).values), 0.0);
}

// Layer l recomputed from its input tap X [N, H] through the ops' CPU reference, as one causal prefill of
// all N tokens (the engine ran a prefill and N - prompt decode steps).
struct Recomputed {
  std::vector<float> q, k, v, attn, output;
};

Recomputed recompute_layer(const ModelConfig& c, const LayerWeights& w, const RopeTable& rope,
                           const std::vector<float>& x_in, int64_t n) {
  const int64_t H = c.hidden_size, Hq = c.num_attention_heads, Hk = c.num_key_value_heads, D = c.head_dim;
  const int64_t I = c.intermediate_size, W = (Hq + 2 * Hk) * D;
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto view = [](std::vector<float>& b, Shape s) { return TensorView(b.data(), DType::kF32, s); };
  std::vector<float> x = x_in, normed(static_cast<size_t>(n * H)), qkv(static_cast<size_t>(n * W));
  ops::rms_norm(view(normed, {n, H}), view(x, {n, H}), w.input_layernorm, eps);
  ops::linear(view(qkv, {n, W}), view(normed, {n, H}), w.qkv_proj, w.qkv_bias);

  Recomputed r;
  r.q.resize(static_cast<size_t>(n * Hq * D));
  r.k.resize(static_cast<size_t>(n * Hk * D));
  r.v.resize(r.k.size());
  std::vector<int32_t> iota(static_cast<size_t>(n)), cu{0, static_cast<int32_t>(n)}, ctx{static_cast<int32_t>(n)},
      table{0};
  for (int64_t i = 0; i < n; ++i) iota[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  auto ints = [](std::vector<int32_t>& b) { return TensorView(b.data(), DType::kI32, {static_cast<int64_t>(b.size())}); };
  AttentionMetadata meta;  // one sequence, one block of n slots: token i at slot i
  meta.num_seqs = 1;
  meta.num_tokens = meta.max_query_len = meta.max_context_len = n;
  meta.cu_seqlens_q = ints(cu);
  meta.context_lens = ints(ctx);
  meta.block_tables = ints(table).reshape({1, 1});
  meta.slot_mapping = ints(iota);
  meta.block_size = n;
  std::vector<float> inv_freq = rope.inv_freq;
  const ops::RopeParams rp{TensorView(inv_freq.data(), DType::kF32, {static_cast<int64_t>(inv_freq.size())}),
                           rope.attention_scaling};
  ops::qkv_prologue(view(r.q, {n, Hq, D}), view(qkv, {n, W}), w.q_norm, w.k_norm, eps, ints(iota), rp,
                    view(r.k, {1, n, Hk, D}), view(r.v, {1, n, Hk, D}), meta);
  r.attn.resize(r.q.size());
  ops::paged_attention(view(r.attn, {n, Hq, D}), view(r.q, {n, Hq, D}), view(r.k, {1, n, Hk, D}),
                       view(r.v, {1, n, Hk, D}), meta, static_cast<float>(1.0 / std::sqrt(double(D))));

  std::vector<float> o(static_cast<size_t>(n * H)), gu(static_cast<size_t>(n * 2 * I)), act(static_cast<size_t>(n * I));
  ops::linear(view(o, {n, H}), view(r.attn, {n, Hq * D}), w.o_proj, w.o_bias);
  for (size_t i = 0; i < o.size(); ++i) x[i] += o[i];  // the residual after attention
  ops::rms_norm(view(normed, {n, H}), view(x, {n, H}), w.post_attention_layernorm, eps);
  ops::linear(view(gu, {n, 2 * I}), view(normed, {n, H}), w.gate_up_proj, TensorView());
  ops::silu_mul(view(act, {n, I}), view(gu, {n, 2 * I}));
  ops::linear(view(o, {n, H}), view(act, {n, I}), w.down_proj, TensorView());
  for (size_t i = 0; i < o.size(); ++i) x[i] += o[i];
  r.output = std::move(x);
  return r;
}

TEST(LayerTaps, MatchEachLayerRecomputedFromTheReferenceOps) {
  TapRecorder taps;
  run_tapped(cpu_config(), taps);
  const ModelConfig c = ModelConfig::from_model_dir(model_dir());
  const ModelWeights weights = load_weights(model_dir(), c);
  const RopeTable rope = compute_rope(c);
  for (int64_t l = 0; l < kLayers; ++l) {
    const Recomputed r =
        recompute_layer(c, weights.layers[static_cast<size_t>(l)], rope, tap_of(taps, l, TapPoint::kInput).values, kRows);
    const std::pair<TapPoint, const std::vector<float>*> expected[] = {
        {TapPoint::kQ, &r.q}, {TapPoint::kK, &r.k}, {TapPoint::kV, &r.v}, {TapPoint::kAttn, &r.attn},
        {TapPoint::kOutput, &r.output}};
    for (const auto& [point, want] : expected) {
      const double tol = 1e-5 * std::max(1.0, max_abs(*want));
      EXPECT_LE(max_abs_diff(tap_of(taps, l, point).values, *want), tol) << "layer " << l << " " << tap_name(point);
    }
    if (l + 1 < kLayers) {  // the residual stream: one layer's output is the next one's input
      EXPECT_EQ(max_abs_diff(tap_of(taps, l, TapPoint::kOutput).values, tap_of(taps, l + 1, TapPoint::kInput).values),
                0.0);
    }
  }
  // Layer 0's input is the prompt's and generated tokens' embeddings.
  std::vector<float> emb(static_cast<size_t>(kRows * c.hidden_size));
  std::vector<int32_t> ids = kPrompt;
  TapRecorder ids_taps({0});
  const std::vector<int32_t> out = run_tapped(cpu_config(), ids_taps);
  ids.insert(ids.end(), out.begin(), out.end() - 1);
  ops::embedding(TensorView(emb.data(), DType::kF32, {kRows, c.hidden_size}),
                 TensorView(ids.data(), DType::kI32, {kRows}), weights.embed_tokens);
  EXPECT_EQ(max_abs_diff(tap_of(taps, 0, TapPoint::kInput).values, emb), 0.0);
}

TEST(LayerTaps, OffloadAndChunkedPrefillTapsEqualThePagedPath) {
  TapRecorder paged, offload, chunked, offload_chunked;
  const std::vector<int32_t> want = run_tapped(cpu_config(), paged);
  EXPECT_EQ(run_tapped(offload_config(), offload), want);
  EngineConfig ec = cpu_config();
  ec.scheduler.max_num_batched_tokens = 8;  // the prompt in 3 prefill steps
  EXPECT_EQ(run_tapped(ec, chunked), want);
  ec = offload_config();
  ec.scheduler.max_num_batched_tokens = 8;  // each layer of the prompt in 3 chunks
  EXPECT_EQ(run_tapped(ec, offload_chunked), want);
  for (const TapRecorder* other : {&offload, &chunked, &offload_chunked}) {
    ASSERT_EQ(other->rows(), kRows);
    for (const auto& [key, tap] : paged.taps()) {
      const double tol = 1e-5 * std::max(1.0, max_abs(tap.values));  // same fp32 math, other plumbing
      EXPECT_LE(max_abs_diff(tap_of(*other, key.first, key.second).values, tap.values), tol)
          << "layer " << key.first << " " << tap_name(key.second);
    }
  }
}

using testing::run_command;

std::string compare_taps_script() {
  return (std::filesystem::path(NANOVLLM_TEST_DATA).parent_path().parent_path() / "scripts" / "compare_taps.py").string();
}

TEST(LayerTaps, CliDumpsTapsOnBothPaths) {
  testing::ProcessScratchDir dir("nanovllm-taps-cli");
  const std::string gen = testing::nanovllm_binary().string() + " generate --backend cpu --model " + model_dir().string() +
                          " --prompt-ids 5,6,7,8,9,10,11,12,13 --temperature 0 --max-tokens 4 --ignore-eos";
  const std::string paged = (dir.path() / "paged").string(), off = (dir.path() / "off").string();
  auto r = run_command(gen + " --dump-taps " + paged);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(gen + " --dump-taps " + off + " --tap-layers 2,0 --enable-cpu-offload --offload-min-tokens 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const SafetensorsFile all(dir.path() / "paged" / "taps.safetensors");
  const SafetensorsFile some(dir.path() / "off" / "taps.safetensors");
  EXPECT_EQ(all.names().size(), kLayers * kTapPoints.size());
  EXPECT_EQ(some.names(), (std::vector<std::string>{"layers.0.attn", "layers.0.input", "layers.0.k", "layers.0.output",
                                                    "layers.0.q", "layers.0.v", "layers.2.attn", "layers.2.input",
                                                    "layers.2.k", "layers.2.output", "layers.2.q", "layers.2.v"}));
  EXPECT_EQ(all.info("layers.1.q").shape, (Shape{12, 4, 16}));
  EXPECT_EQ(all.info("layers.1.k").shape, (Shape{12, 2, 16}));
  EXPECT_EQ(all.info("layers.1.input").dtype, DType::kF32);
  // The offload path's taps equal the paged path's, as the script sees them.
  r = run_command("python3 " + compare_taps_script() + " --taps " + off + " --reference " + paged + " --rtol 1e-5");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("every tap within tolerance"), std::string::npos) << r.output;
  // Bad input: a clear error, exit status 1.
  for (const std::string& bad : {std::string(" --dump-taps ") + paged + " --tap-layers 3",
                                 std::string(" --dump-taps ") + paged + " --tap-layers 0,x",
                                 std::string(" --tap-layers 0"),
                                 std::string(" --dump-taps ") + paged + " --prompt-ids 1,2"}) {
    r = run_command(gen + bad);
    EXPECT_EQ(r.exit_code, 1) << bad << ": " << r.output;
    EXPECT_NE(r.output.find("error"), std::string::npos) << bad << ": " << r.output;
  }
}

// A stand-in for a broken kernel (test-only, through the observer seam): adds `delta` to every 7th value
// of one (layer, point)'s live activations as they are tapped, so every later op reads wrong values.
class BreakingRecorder : public TapRecorder {
 public:
  BreakingRecorder(int64_t layer, TapPoint point) : layer_(layer), point_(point) {}
  void record(int64_t layer, TapPoint point, TensorView x, TensorView add, ops::Stream s) override {
    if (layer == layer_ && point == point_) {
      float* d = x.data_as<float>();  // CPU backend: host memory
      for (int64_t i = 0; i < x.numel(); i += 7) d[i] += 0.5f;
    }
    TapRecorder::record(layer, point, x, add, s);
  }

 private:
  int64_t layer_;
  TapPoint point_;
};

std::map<std::string, std::string> metadata_of(const std::vector<int32_t>& generated) {
  std::string ids;
  std::vector<int32_t> tokens = kPrompt;
  tokens.insert(tokens.end(), generated.begin(), generated.end() - 1);
  for (int32_t t : tokens) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  return {{"format", "nanovllm-taps-v1"}, {"token_ids", ids}, {"backend", "cpu"}, {"path", "paged"}};
}

TEST(LayerTaps, CompareTapsNamesTheLayerAndTapOfABrokenOp) {
  testing::ProcessScratchDir dir("nanovllm-taps-broken");
  TapRecorder good;
  const std::vector<int32_t> tokens = run_tapped(cpu_config(), good);
  std::filesystem::create_directories(dir.path() / "good");
  good.write(dir.path() / "good" / "taps.safetensors", metadata_of(tokens));
  // The broken op's own output departs first; every tap before it is untouched.
  for (const auto& [layer, point] : {std::pair{int64_t{1}, TapPoint::kAttn}, std::pair{int64_t{0}, TapPoint::kQ},
                                     std::pair{int64_t{2}, TapPoint::kOutput}}) {
    SCOPED_TRACE(std::to_string(layer) + " " + tap_name(point));
    BreakingRecorder broken(layer, point);
    LLM llm(cpu_config());
    llm.engine().set_layer_taps(&broken);
    const auto out = llm.generate({kPrompt}, greedy(kMaxTokens)).at(0).token_ids;
    const std::filesystem::path bad = dir.path() / ("broken-" + std::to_string(layer) + tap_name(point));
    std::filesystem::create_directories(bad);
    // Generated tokens may differ: compare the prompt's rows, which both runs computed from the same ids.
    broken.write(bad / "taps.safetensors", metadata_of(out));
    std::string prompt_ids;
    for (int32_t t : kPrompt) prompt_ids += (prompt_ids.empty() ? "" : ",") + std::to_string(t);
    const auto r = run_command("python3 " + compare_taps_script() + " --taps " + bad.string() + " --reference " +
                               (dir.path() / "good").string() + " --prompt-ids " + prompt_ids);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("first departure: layer " + std::to_string(layer) + " tap " + tap_name(point) + " "),
              std::string::npos)
        << r.output;
  }
  // A correct run: nothing departs (exit 0).
  const auto r = run_command("python3 " + compare_taps_script() + " --taps " + (dir.path() / "good").string() +
                             " --reference " + (dir.path() / "good").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace nanovllm
