// Test helpers for the model tests: temp directories and a minimal safetensors writer/reader written
// independently of src/nanovllm/model/safetensors.cpp (string-built header, raw byte I/O).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace model_test {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info ? info->test_suite_name() : "t") + "_" + (info ? info->name() : "x");
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    path_ = fs::temp_directory_path() / ("nanovllm_model_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& s) const { return path_ / s; }

 private:
  fs::path path_;
};

struct RawTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::string bytes;
};

inline std::string shape_json(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(s[i]);
  }
  return out + "]";
}

// Header built by string concatenation; tensors laid out back to back in the given order.
inline std::string safetensors_header(const std::vector<RawTensor>& ts, bool metadata = true) {
  std::string h = "{";
  if (metadata) h += "\"__metadata__\":{\"format\":\"pt\"}";
  size_t off = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (metadata || i) h += ",";
    h += "\"" + ts[i].name + "\":{\"dtype\":\"" + ts[i].dtype + "\",\"shape\":" + shape_json(ts[i].shape) +
         ",\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + ts[i].bytes.size()) + "]}";
    off += ts[i].bytes.size();
  }
  return h + "}";
}

inline std::string u64_le(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

inline void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << p;
}

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Full file bytes for a header + data (header padded with spaces to a multiple of 8).
inline std::string safetensors_bytes(const std::string& header_json, const std::vector<RawTensor>& ts) {
  std::string h = header_json;
  while (h.size() % 8) h += ' ';
  std::string out = u64_le(h.size()) + h;
  for (const RawTensor& t : ts) out += t.bytes;
  return out;
}

inline void write_safetensors(const fs::path& p, const std::vector<RawTensor>& ts) {
  write_file(p, safetensors_bytes(safetensors_header(ts), ts));
}

// Independent reader: parses the header with nlohmann::json and copies each tensor's bytes.
inline std::vector<RawTensor> read_safetensors(const fs::path& p) {
  const std::string f = read_file(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(f[static_cast<size_t>(i)]);
  const auto header = nlohmann::json::parse(f.substr(8, n));
  std::vector<RawTensor> out;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    RawTensor t;
    t.name = name;
    t.dtype = e["dtype"].get<std::string>();
    t.shape = e["shape"].get<std::vector<int64_t>>();
    const auto off = e["data_offsets"].get<std::vector<size_t>>();
    t.bytes = f.substr(8 + n + off[0], off[1] - off[0]);
    out.push_back(std::move(t));
  }
  return out;
}

// All tensors of a checkpoint dir (single file or index), independent of the library's reader.
inline std::vector<RawTensor> read_checkpoint(const fs::path& dir) {
  if (fs::exists(dir / "model.safetensors")) return read_safetensors(dir / "model.safetensors");
  const auto index = nlohmann::json::parse(read_file(dir / "model.safetensors.index.json"));
  std::vector<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items())
    if (std::find(files.begin(), files.end(), file.get<std::string>()) == files.end()) files.push_back(file);
  std::vector<RawTensor> out;
  for (const std::string& f : files)
    for (RawTensor& t : read_safetensors(dir / f)) out.push_back(std::move(t));
  return out;
}

inline const RawTensor& find_tensor(const std::vector<RawTensor>& ts, const std::string& name) {
  for (const RawTensor& t : ts)
    if (t.name == name) return t;
  ADD_FAILURE() << "no tensor " << name;
  static RawTensor empty;
  return empty;
}

inline std::string bytes_of(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

}  // namespace model_test
