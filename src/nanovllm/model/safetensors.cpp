#include "nanovllm/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "nanovllm/core/error.h"

namespace nanovllm {
namespace {

using nlohmann::json;

// The safetensors reference implementation refuses headers above 100 MB; so do we, before parsing.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

bool parse_dtype(const std::string& s, DType& out) {
  if (s == "BF16") { out = DType::kBF16; return true; }
  if (s == "F16") { out = DType::kF16; return true; }
  if (s == "F32") { out = DType::kF32; return true; }
  if (s == "F8_E4M3") { out = DType::kF8E4M3; return true; }  // block-scaled FP8 checkpoints
  return false;
}

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::map<std::string, TensorInfo> parse_safetensors(const void* image, size_t size, const std::filesystem::path& file) {
  const std::string where = file.string();
  NANOVLLM_CHECK(size >= 8, where, ": file is ", size, " bytes, too small for a safetensors header");
  std::map<std::string, TensorInfo> tensors;
  const auto* bytes = static_cast<const unsigned char*>(image);
  const uint64_t header_len = read_u64_le(bytes);
  NANOVLLM_CHECK(header_len <= size - 8, where, ": header length ", header_len,
                 " is larger than the file allows (file is ", size, " bytes); the file is truncated or corrupt");
  NANOVLLM_CHECK(header_len <= kMaxHeaderBytes, where, ": header length ", header_len, " exceeds ",
                 kMaxHeaderBytes, " bytes");
  const size_t data_start = 8 + static_cast<size_t>(header_len);
  const size_t data_size = size - data_start;

  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(bytes + 8), reinterpret_cast<const char*>(bytes + data_start));
  } catch (const json::exception& e) {
    NANOVLLM_FAIL(where, ": header is not valid JSON: ", e.what());
  }
  NANOVLLM_CHECK(header.is_object(), where, ": header must be a JSON object");

  struct Range { size_t begin, end; std::string name; };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    NANOVLLM_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") &&
                       entry.contains("data_offsets"),
                   where, ": tensor '", name, "': header entry must have dtype, shape and data_offsets");
    const json& jd = entry.at("dtype");
    const json& js = entry.at("shape");
    const json& jo = entry.at("data_offsets");
    TensorInfo t;
    t.file = file;
    NANOVLLM_CHECK(jd.is_string(), where, ": tensor '", name, "': dtype must be a string");
    NANOVLLM_CHECK(parse_dtype(jd.get<std::string>(), t.dtype), where, ": tensor '", name, "' has dtype ",
                   jd.get<std::string>(), "; only BF16, F16, F32 and F8_E4M3 are supported");
    NANOVLLM_CHECK(js.is_array() && js.size() <= static_cast<size_t>(kMaxDims), where, ": tensor '", name,
                   "': shape must be a list of at most ", kMaxDims, " dimensions (got ", js.dump(), ")");
    uint64_t numel = 1;
    for (const json& d : js) {
      NANOVLLM_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), where,
                     ": tensor '", name, "': shape ", js.dump(), " must hold non-negative integers");
      const uint64_t v = d.get<uint64_t>();
      NANOVLLM_CHECK(v < (1ull << 40) && (v == 0 || numel <= (1ull << 60) / v), where, ": tensor '", name,
                     "': shape ", js.dump(), " is too large");
      numel *= v;
      t.shape.dims[static_cast<size_t>(t.shape.ndim++)] = static_cast<int64_t>(v);
    }
    NANOVLLM_CHECK(jo.is_array() && jo.size() == 2 && jo[0].is_number_unsigned() && jo[1].is_number_unsigned(),
                   where, ": tensor '", name, "': data_offsets must be [begin, end] (got ", jo.dump(), ")");
    const uint64_t begin = jo[0].get<uint64_t>();
    const uint64_t end = jo[1].get<uint64_t>();
    NANOVLLM_CHECK(begin <= end, where, ": tensor '", name, "': data_offsets ", jo.dump(), " are reversed");
    NANOVLLM_CHECK(end <= data_size, where, ": tensor '", name, "': data_offsets ", jo.dump(),
                   " run past the end of the file (", data_size, " data bytes); the file is truncated");
    const uint64_t expect = numel * dtype_size(t.dtype);
    NANOVLLM_CHECK(end - begin == expect, where, ": tensor '", name, "': data_offsets ", jo.dump(), " span ",
                   end - begin, " bytes but shape ", t.shape.str(), " x ", jd.get<std::string>(), " needs ",
                   expect);
    t.nbytes = static_cast<size_t>(expect);
    t.data = bytes + data_start + begin;
    ranges.push_back({static_cast<size_t>(begin), static_cast<size_t>(end), name});
    tensors.emplace(name, t);
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i)
    NANOVLLM_CHECK(ranges[i].begin >= ranges[i - 1].end || ranges[i].begin == ranges[i].end ||
                       ranges[i - 1].begin == ranges[i - 1].end,
                   where, ": tensors '", ranges[i - 1].name, "' and '", ranges[i].name, "' overlap");
  return tensors;
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  const std::string where = path.string();
  const int fd = ::open(where.c_str(), O_RDONLY | O_CLOEXEC);
  NANOVLLM_CHECK(fd >= 0, "cannot open safetensors file ", where, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    NANOVLLM_FAIL("cannot stat ", where, ": ", std::strerror(err));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    NANOVLLM_FAIL(where, ": file is ", size_, " bytes, too small for a safetensors header");
  }
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file alive
  NANOVLLM_CHECK(m != MAP_FAILED, "cannot mmap ", where, ": ", std::strerror(map_err));
  map_ = m;

  try {
    tensors_ = parse_safetensors(map_, size_, path);
  } catch (...) {
    ::munmap(map_, size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, size_);
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  NANOVLLM_CHECK(it != tensors_.end(), path_.string(), ": no tensor named '", name, "'");
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::filesystem::path& dir) : dir_(dir) {
  namespace fs = std::filesystem;
  NANOVLLM_CHECK(fs::is_directory(dir), "model directory ", dir.string(), " does not exist");
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (fs::is_regular_file(index_path)) {
    const std::string where = index_path.string();
    std::ifstream in(index_path, std::ios::binary);
    NANOVLLM_CHECK(in.good(), "cannot open ", where);
    std::ostringstream ss;
    ss << in.rdbuf();
    json index;
    try {
      index = json::parse(ss.str());
    } catch (const json::exception& e) {
      NANOVLLM_FAIL(where, ": invalid JSON: ", e.what());
    }
    NANOVLLM_CHECK(index.is_object() && index.contains("weight_map") && index.at("weight_map").is_object(), where,
                   ": must be an object with a 'weight_map' object");
    std::map<std::string, const SafetensorsFile*> opened;  // shard file name -> file, each opened once
    for (const auto& [name, shard] : index.at("weight_map").items()) {
      NANOVLLM_CHECK(shard.is_string(), where, ": weight_map['", name, "'] must be a file name");
      const std::string file = shard.get<std::string>();
      const fs::path rel(file);
      NANOVLLM_CHECK(!file.empty() && rel.is_relative() && rel.lexically_normal().string().rfind("..", 0) != 0,
                     where, ": weight_map['", name, "'] = '", file, "' must be a file inside the model directory");
      auto it = opened.find(file);
      if (it == opened.end()) {
        const fs::path shard_path = dir / rel;
        NANOVLLM_CHECK(fs::is_regular_file(shard_path), where, ": shard ", shard_path.string(), " (holding '", name,
                       "') is missing");
        files_.push_back(std::make_unique<SafetensorsFile>(shard_path));
        it = opened.emplace(file, files_.back().get()).first;
      }
      const SafetensorsFile& f = *it->second;
      NANOVLLM_CHECK(f.has(name), where, ": tensor '", name, "' is listed in shard ", f.path().string(),
                     " but that file does not contain it");
      index_.emplace(name, &f.info(name));
    }
    return;
  }
  const fs::path single = dir / "model.safetensors";
  std::vector<fs::path> paths;
  if (fs::is_regular_file(single)) {
    paths.push_back(single);
  } else {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") paths.push_back(e.path());
    std::sort(paths.begin(), paths.end());
  }
  NANOVLLM_CHECK(!paths.empty(), "no model.safetensors or model.safetensors.index.json in ", dir.string());
  for (const fs::path& p : paths) {
    files_.push_back(std::make_unique<SafetensorsFile>(p));
    add_file_tensors(*files_.back());
  }
}

void SafetensorsCheckpoint::add_file_tensors(const SafetensorsFile& file) {
  for (const std::string& name : file.names()) {
    auto [it, inserted] = index_.emplace(name, &file.info(name));
    NANOVLLM_CHECK(inserted, "tensor '", name, "' appears in both ", it->second->file.string(), " and ",
                   file.path().string());
  }
}

const TensorInfo& SafetensorsCheckpoint::info(const std::string& name) const {
  auto it = index_.find(name);
  NANOVLLM_CHECK(it != index_.end(), "checkpoint ", dir_.string(), " has no tensor named '", name, "'");
  return *it->second;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& kv : index_) out.push_back(kv.first);
  return out;
}

std::ofstream begin_safetensors_file(const std::filesystem::path& path, std::string header_json) {
  header_json.append((8 - header_json.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  NANOVLLM_CHECK(out.good(), "cannot write ", path.string());
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(header_json.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(header_json.data(), static_cast<std::streamsize>(header_json.size()));
  return out;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsEntry& t : tensors) {
    const bool writable = t.dtype == DType::kF32 || t.dtype == DType::kBF16 || t.dtype == DType::kF16 ||
                          t.dtype == DType::kF8E4M3;
    NANOVLLM_CHECK(writable, path.string(), ": tensor '", t.name, "' has dtype ", dtype_name(t.dtype),
                   "; only F32, BF16, F16 and F8_E4M3 are written");
    const std::string dtype(dtype_name(t.dtype));  // the safetensors spelling
    NANOVLLM_CHECK(t.name != "__metadata__" && !header.contains(t.name), path.string(), ": tensor name '", t.name,
                   "' is reserved or given twice");
    const uint64_t bytes = static_cast<uint64_t>(t.shape.numel()) * dtype_size(t.dtype);
    NANOVLLM_CHECK(bytes == 0 || t.data != nullptr, path.string(), ": tensor '", t.name, "' has no data");
    json shape = json::array();
    for (int d = 0; d < t.shape.ndim; ++d) shape.push_back(t.shape[d]);
    header[t.name] = json{{"dtype", dtype}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::ofstream out = begin_safetensors_file(path, header.dump());
  for (const SafetensorsEntry& t : tensors)
    out.write(static_cast<const char*>(t.data), static_cast<std::streamsize>(t.shape.numel() * dtype_size(t.dtype)));
  out.close();
  NANOVLLM_CHECK(!out.fail(), "cannot write ", path.string(), " (disk full?)");
}

}  // namespace nanovllm
