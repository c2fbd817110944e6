// libFuzzer target: arbitrary bytes as a .safetensors file image into parse_safetensors (the header parser
// every checkpoint load goes through; model/safetensors.h).
// Invariants: a bad file -> nanovllm::Error and nothing else (no other exception, no crash, no huge
// allocation); an accepted file -> every tensor lies inside the data section, spans exactly
// numel x dtype size bytes, and no two non-empty tensors overlap (every byte is read, so ASan sees any
// stray pointer).
// Input forms, by the first byte: even -> the rest is the raw file image; odd -> the rest is
// "<JSON header>\0<data bytes>" and the image is built around it with the correct u64 header length (so
// the fuzzer explores headers without having to guess lengths).
// Build and run: scripts/fuzz_safetensors.sh [seconds]
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "nanovllm/core/error.h"
#include "nanovllm/model/safetensors.h"

namespace {

std::vector<unsigned char> file_image(const uint8_t* data, size_t size) {
  if (size == 0) return {};
  const uint8_t* rest = data + 1;
  const size_t n = size - 1;
  if ((data[0] & 1) == 0) return std::vector<unsigned char>(rest, rest + n);
  const auto* nul = static_cast<const uint8_t*>(std::memchr(rest, 0, n));
  const size_t header_len = nul ? static_cast<size_t>(nul - rest) : n;
  std::vector<unsigned char> image(8);
  for (int i = 0; i < 8; ++i) image[static_cast<size_t>(i)] = static_cast<unsigned char>(static_cast<uint64_t>(header_len) >> (8 * i));
  image.insert(image.end(), rest, rest + header_len);
  if (nul) image.insert(image.end(), nul + 1, rest + n);
  return image;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<unsigned char> image = file_image(data, size);
  std::map<std::string, nanovllm::TensorInfo> tensors;
  try {
    tensors = nanovllm::parse_safetensors(image.data(), image.size(), "fuzz.safetensors");
  } catch (const nanovllm::Error&) {
    return 0;  // rejected: fine
  }
  // Accepted: check every tensor against the image.
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | image[static_cast<size_t>(i)];
  const unsigned char* data_begin = image.data() + 8 + header_len;
  const unsigned char* data_end = image.data() + image.size();
  std::vector<std::pair<const unsigned char*, const unsigned char*>> spans;
  unsigned sum = 0;
  for (const auto& [name, t] : tensors) {
    const auto* p = static_cast<const unsigned char*>(t.data);
    if (p < data_begin || p > data_end || t.nbytes > static_cast<size_t>(data_end - p)) std::abort();
    size_t numel = 1;
    for (int d = 0; d < t.shape.ndim; ++d) numel *= static_cast<size_t>(t.shape.dims[static_cast<size_t>(d)]);
    if (numel * nanovllm::dtype_size(t.dtype) != t.nbytes) std::abort();
    for (size_t i = 0; i < t.nbytes; ++i) sum += p[i];
    if (t.nbytes > 0) spans.emplace_back(p, p + t.nbytes);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) std::abort();
  asm volatile("" : : "r"(sum));  // the reads above happen (ASan checks them)
  return 0;
}
