// Read-only access to .safetensors files (memory-mapped) and to a model directory's checkpoint: one
// model.safetensors, or shards listed by model.safetensors.index.json.
//
// Format: u64 little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {...}}
// then the data; offsets are relative to the start of the data (byte 8 + N).
#pragma once

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nanovllm/core/dtype.h"
#include "nanovllm/core/tensor.h"

namespace nanovllm {

struct TensorInfo {
  DType dtype = DType::kF32;  // BF16, F16, F32 or F8_E4M3
  Shape shape;
  const void* data = nullptr;  // into the mapped file, valid while the file/checkpoint lives
  size_t nbytes = 0;
  std::filesystem::path file;  // the file it comes from (for error messages)
};

// Validates a whole safetensors file image (`size` bytes: the u64 header length, the JSON header, the
// data) and returns its tensors, whose `data` point into `image`. Throws nanovllm::Error naming `file`
// (and the tensor) for anything malformed: a header past the end or over 100 MB, bad JSON, unsupported
// dtypes, shapes too large, offsets outside the data or not matching the shape, overlapping tensors.
std::map<std::string, TensorInfo> parse_safetensors(const void* image, size_t size, const std::filesystem::path& file);

class SafetensorsFile {
 public:
  // Maps `path` and validates the whole header; throws nanovllm::Error naming the file (and tensor).
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // throws when absent
  std::vector<std::string> names() const;                  // sorted

 private:
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
};

// Creates `path` and writes a safetensors preamble: the header's length (u64 little-endian) and the header
// JSON, space-padded so the data starts 8-byte aligned. The caller writes the tensors' bytes next, in the
// header's offset order, into the returned stream. Throws nanovllm::Error when the file cannot be written.
std::ofstream begin_safetensors_file(const std::filesystem::path& path, std::string header_json);

// A tensor for write_safetensors: row-major host data of `shape` (F32, BF16, F16 or F8_E4M3).
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  const void* data = nullptr;
};

// Writes `tensors` (data back to back in the given order) and `metadata` (the "__metadata__" string map)
// as one .safetensors file readable by SafetensorsFile and by the safetensors library. Throws
// nanovllm::Error naming the file or the tensor (duplicate or reserved name, unsupported dtype, I/O).
void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

class SafetensorsCheckpoint {
 public:
  // Opens `dir`/model.safetensors.index.json (every shard it names, each once) if present, else
  // `dir`/model.safetensors, else every *.safetensors file in `dir`.
  explicit SafetensorsCheckpoint(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  const TensorInfo& info(const std::string& name) const;  // throws naming the tensor and the directory
  std::vector<std::string> names() const;                  // sorted
  size_t num_files() const { return files_.size(); }

 private:
  void add_file_tensors(const SafetensorsFile& file);

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> index_;
};

}  // namespace nanovllm
