// Layer taps: an optional observer of the decoder's activations, carried with a step's inputs
// (DecoderInputs::taps), for comparing any backend or path with a reference layer by layer
// (`nanovllm generate --dump-taps`, scripts/compare_taps.py). Without one (nullptr) a layer runs exactly
// as before, at the cost of one pointer test. With one, a tapped layer runs its attention prologue
// unfused (ops::qkv_prologue, then ops::paged_attention: same values by the ops.h contract) so q exists
// in memory, and each tap waits for the stream: a debugging path, never a fast one.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/host_copy.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm {

// The points of a decoder layer, in the order a layer produces them. D = head_dim.
enum class TapPoint {
  kInput,   // [T, H]      the layer's input hidden state (embedding for layer 0; residual stream after)
  kQ,       // [T, Hq, D]  q after q_norm and RoPE
  kK,       // [T, Hk, D]  k after k_norm and RoPE (read back from the KV cache the attention reads)
  kV,       // [T, Hk, D]  v (read back from the KV cache)
  kAttn,    // [T, Hq, D]  the attention output, before o_proj
  kOutput,  // [T, H]      the layer's output hidden state (= the next layer's input)
};
inline constexpr std::array<TapPoint, 6> kTapPoints{TapPoint::kInput, TapPoint::kQ,    TapPoint::kK,
                                                    TapPoint::kV,     TapPoint::kAttn, TapPoint::kOutput};
const char* tap_name(TapPoint p);  // "input", "q", "k", "v", "attn", "output"

class LayerTaps {
 public:
  virtual ~LayerTaps() = default;
  // Whether layer `layer` is tapped (untapped layers run the untouched fast path).
  virtual bool wants(int64_t layer) const = 0;
  // The step's rows of `point`: x [T, ...] on the model's device, plus `add` (same shape and device) when
  // it is defined (the residual stream is kept as two parts; the tap is their sum). Ready once the work
  // issued on s so far is done. Observers read; a test may write x to simulate a broken kernel.
  virtual void record(int64_t layer, TapPoint point, TensorView x, TensorView add, ops::Stream s) = 0;
};

// Records taps on the host in fp32, appending each step's rows, and writes them as one .safetensors file.
// Rows of a (layer, point) are the tokens in the order the steps processed them: for one sequence, every
// prompt token then every decode step's token, whatever the prefill chunking or path.
class TapRecorder : public LayerTaps {
 public:
  // `layers`: the layers to record; empty = every layer.
  explicit TapRecorder(std::vector<int64_t> layers = {});

  bool wants(int64_t layer) const override;
  void record(int64_t layer, TapPoint point, TensorView x, TensorView add, ops::Stream s) override;

  struct Tap {
    Shape row_shape;  // the shape of one row (x's shape without dim 0)
    int64_t rows = 0;
    std::vector<float> values;  // [rows, row_shape...]
  };
  const std::map<std::pair<int64_t, TapPoint>, Tap>& taps() const { return taps_; }
  // The number of rows every tap holds (throws when they differ); 0 when nothing was recorded.
  int64_t rows() const;

  // "layers.<l>.<point>" F32 [rows, row_shape...] for every tap, and `metadata` as the file's __metadata__.
  void write(const std::filesystem::path& path, const std::map<std::string, std::string>& metadata) const;

 private:
  std::vector<int64_t> layers_;  // sorted; empty = all
  std::map<std::pair<int64_t, TapPoint>, Tap> taps_;
  std::vector<unsigned char> staging_;
};

// "0,3,5" -> {0, 3, 5} (sorted, unique); a clear error for anything else or a layer outside [0, num_layers).
std::vector<int64_t> parse_tap_layers(const std::string& text, int64_t num_layers);

}  // namespace nanovllm
