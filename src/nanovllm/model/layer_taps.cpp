#include "nanovllm/model/layer_taps.h"

#include <algorithm>
#include <sstream>

#include "nanovllm/core/error.h"
#include "nanovllm/model/safetensors.h"

namespace nanovllm {
namespace {

Shape row_shape_of(const TensorView& x) {
  Shape s;
  s.ndim = x.ndim() - 1;
  for (int d = 1; d < x.ndim(); ++d) s.dims[static_cast<size_t>(d - 1)] = x.dim(d);
  return s;
}

}  // namespace

const char* tap_name(TapPoint p) {
  switch (p) {
    case TapPoint::kInput: return "input";
    case TapPoint::kQ: return "q";
    case TapPoint::kK: return "k";
    case TapPoint::kV: return "v";
    case TapPoint::kAttn: return "attn";
    case TapPoint::kOutput: return "output";
  }
  return "?";
}

TapRecorder::TapRecorder(std::vector<int64_t> layers) : layers_(std::move(layers)) {
  std::sort(layers_.begin(), layers_.end());
  layers_.erase(std::unique(layers_.begin(), layers_.end()), layers_.end());
}

bool TapRecorder::wants(int64_t layer) const {
  return layers_.empty() || std::binary_search(layers_.begin(), layers_.end(), layer);
}

void TapRecorder::record(int64_t layer, TapPoint point, TensorView x, TensorView add, ops::Stream s) {
  NANOVLLM_CHECK(x.ndim() >= 1, "layer tap ", layer, ".", tap_name(point), ": a tensor of rank 0");
  Tap& tap = taps_[{layer, point}];
  const Shape row = row_shape_of(x);
  if (tap.rows == 0) tap.row_shape = row;
  NANOVLLM_CHECK(tap.row_shape == row, "layer tap ", layer, ".", tap_name(point), ": rows of shape ", row.str(),
                 " after rows of shape ", tap.row_shape.str());
  const size_t n = static_cast<size_t>(x.numel());
  const size_t begin = tap.values.size();
  tap.values.resize(begin + n);
  staging_.resize(x.nbytes());
  ops::copy_to_host(staging_.data(), x, s);
  for (size_t i = 0; i < n; ++i) tap.values[begin + i] = load_as_f32(staging_.data(), x.dtype(), i);
  if (add.defined() && add.numel() > 0) {
    NANOVLLM_CHECK(add.shape() == x.shape(), "layer tap ", layer, ".", tap_name(point), ": the added part has shape ",
                   add.shape().str(), ", expected ", x.shape().str());
    staging_.resize(add.nbytes());
    ops::copy_to_host(staging_.data(), add, s);
    for (size_t i = 0; i < n; ++i) tap.values[begin + i] += load_as_f32(staging_.data(), add.dtype(), i);
  }
  tap.rows += x.dim(0);
}

int64_t TapRecorder::rows() const {
  int64_t rows = -1;
  for (const auto& [key, tap] : taps_) {
    NANOVLLM_CHECK(rows < 0 || tap.rows == rows, "layer tap ", key.first, ".", tap_name(key.second), " holds ",
                   tap.rows, " rows, other taps ", rows);
    rows = tap.rows;
  }
  return std::max<int64_t>(rows, 0);
}

void TapRecorder::write(const std::filesystem::path& path, const std::map<std::string, std::string>& metadata) const {
  rows();  // every tap holds the same tokens
  std::vector<SafetensorsEntry> entries;
  for (const auto& [key, tap] : taps_) {
    Shape shape;
    shape.ndim = tap.row_shape.ndim + 1;
    NANOVLLM_CHECK(shape.ndim <= kMaxDims, "layer tap of rank ", shape.ndim);
    shape.dims[0] = tap.rows;
    for (int d = 0; d < tap.row_shape.ndim; ++d) shape.dims[static_cast<size_t>(d + 1)] = tap.row_shape[d];
    entries.push_back({"layers." + std::to_string(key.first) + "." + tap_name(key.second), DType::kF32, shape,
                       tap.values.data()});
  }
  write_safetensors(path, entries, metadata);
}

std::vector<int64_t> parse_tap_layers(const std::string& text, int64_t num_layers) {
  std::vector<int64_t> layers;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    size_t used = 0;
    int64_t l = -1;
    try {
      l = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    NANOVLLM_CHECK(!item.empty() && used == item.size() && l >= 0 && l < num_layers, "--tap-layers '", text,
                   "': '", item, "' is not a layer index in [0, ", num_layers, ")");
    layers.push_back(l);
  }
  NANOVLLM_CHECK(!layers.empty() && text.back() != ',', "--tap-layers '", text,
                 "': give comma-separated layer indices, e.g. 0,3");
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  return layers;
}

}  // namespace nanovllm
