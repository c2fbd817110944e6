#include <gtest/gtest.h>

#include "support/expect_error.h"

#include <cstring>
#include <random>

#include "model/model_test_util.h"
#include "nanovllm/core/error.h"
#include "nanovllm/model/safetensors.h"

using namespace nanovllm;
using namespace model_test;

namespace {

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

RawTensor tensor(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, uint32_t seed) {
  size_t n = dtype == "F32" ? 4 : 2;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return {name, dtype, std::move(shape), random_bytes(n, seed)};
}

std::vector<RawTensor> sample() {
  return {tensor("model.embed_tokens.weight", "BF16", {17, 5}, 1), tensor("a.f32", "F32", {3, 1, 7}, 2),
          tensor("b.f16", "F16", {129}, 3), tensor("scalar", "F32", {}, 4), tensor("empty", "BF16", {0, 4}, 5)};
}

using nanovllm::testing::expect_error;

void expect_same(const TensorInfo& info, const RawTensor& t) {
  const DType want = t.dtype == "F32" ? DType::kF32 : t.dtype == "F16" ? DType::kF16 : DType::kBF16;
  EXPECT_EQ(info.dtype, want) << t.name;
  ASSERT_EQ(info.shape.ndim, static_cast<int>(t.shape.size())) << t.name;
  for (size_t d = 0; d < t.shape.size(); ++d) EXPECT_EQ(info.shape[static_cast<int>(d)], t.shape[d]) << t.name;
  ASSERT_EQ(info.nbytes, t.bytes.size()) << t.name;
  EXPECT_EQ(bytes_of(info.data, info.nbytes), t.bytes) << t.name;
}

}  // namespace

TEST(Safetensors, RoundTripAgainstIndependentWriter) {
  TempDir dir;
  const auto ts = sample();
  write_safetensors(dir / "x.safetensors", ts);
  const SafetensorsFile f(dir / "x.safetensors");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a.f32", "b.f16", "empty", "model.embed_tokens.weight", "scalar"}));
  for (const RawTensor& t : ts) {
    ASSERT_TRUE(f.has(t.name));
    expect_same(f.info(t.name), t);
    EXPECT_EQ(f.info(t.name).file, dir / "x.safetensors");
  }
  EXPECT_FALSE(f.has("__metadata__"));
  expect_error([&] { f.info("missing.weight"); }, {"missing.weight", "x.safetensors"});
}

TEST(Safetensors, HeaderWithoutMetadataAndOutOfOrderOffsets) {
  TempDir dir;
  // Data stored in reverse order of the header entries: offsets, not order, decide.
  auto ts = sample();
  const std::vector<RawTensor> rev(ts.rbegin(), ts.rend());
  std::string h = "{";
  size_t off = 0;
  std::vector<std::string> entries;
  for (const RawTensor& t : rev) {
    entries.push_back("\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":" + shape_json(t.shape) +
                      ",\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + t.bytes.size()) + "]}");
    off += t.bytes.size();
  }
  for (size_t i = entries.size(); i-- > 0;) {
    h += entries[i];
    if (i) h += ',';
  }
  h += "}";
  write_file(dir / "y.safetensors", safetensors_bytes(h, rev));
  const SafetensorsFile f(dir / "y.safetensors");
  for (const RawTensor& t : ts) expect_same(f.info(t.name), t);
}

TEST(Safetensors, TruncatedFile) {
  TempDir dir;
  auto ts = sample();
  ts.pop_back();  // "scalar" is now the last tensor in the file
  std::string bytes = safetensors_bytes(safetensors_header(ts), ts);
  bytes.resize(bytes.size() - 2);
  write_file(dir / "t.safetensors", bytes);
  expect_error([&] { SafetensorsFile f(dir / "t.safetensors"); }, {"t.safetensors", "'scalar'", "truncated"});
  write_file(dir / "t.safetensors", bytes.substr(0, 5));
  expect_error([&] { SafetensorsFile f(dir / "t.safetensors"); }, {"t.safetensors", "too small"});
}

TEST(Safetensors, LyingHeaderLength) {
  TempDir dir;
  const auto ts = sample();
  std::string bytes = safetensors_bytes(safetensors_header(ts), ts);
  const std::string lie = u64_le(bytes.size());  // longer than what follows the length field
  bytes.replace(0, 8, lie);
  write_file(dir / "l.safetensors", bytes);
  expect_error([&] { SafetensorsFile f(dir / "l.safetensors"); }, {"l.safetensors", "header length"});
  bytes.replace(0, 8, u64_le(~0ull));
  write_file(dir / "l.safetensors", bytes);
  expect_error([&] { SafetensorsFile f(dir / "l.safetensors"); }, {"l.safetensors", "header length"});
  // Too short: the JSON is cut off.
  bytes.replace(0, 8, u64_le(16));
  write_file(dir / "l.safetensors", bytes);
  expect_error([&] { SafetensorsFile f(dir / "l.safetensors"); }, {"l.safetensors", "JSON"});
}

TEST(Safetensors, GarbageHeaders) {
  TempDir dir;
  const auto ts = sample();
  const auto p = dir / "g.safetensors";
  auto with_header = [&](const std::string& h) { write_file(p, safetensors_bytes(h, ts)); };

  with_header("not json at all");
  expect_error([&] { SafetensorsFile f(p); }, {"g.safetensors", "JSON"});
  with_header("[1,2,3]");
  expect_error([&] { SafetensorsFile f(p); }, {"g.safetensors", "object"});
  with_header(R"({"w":{"dtype":"BF16","shape":[2]}})");
  expect_error([&] { SafetensorsFile f(p); }, {"g.safetensors", "'w'", "data_offsets"});
  with_header(R"({"w":{"dtype":"BF16","shape":[2,-1],"data_offsets":[0,4]}})");
  expect_error([&] { SafetensorsFile f(p); }, {"g.safetensors", "'w'", "shape"});
  with_header(R"({"w":{"dtype":"BF16","shape":[2],"data_offsets":[4,0]}})");
  expect_error([&] { SafetensorsFile f(p); }, {"g.safetensors", "'w'", "reversed"});
  with_header(R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,4]}})");
  expect_error([&] { SafetensorsFile f(p); }, {"g.safetensors", "'w'", "dtype"});
  // Offsets that disagree with shape x dtype size.
  with_header(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,12]}})");
  expect_error([&] { SafetensorsFile f(p); }, {"g.safetensors", "'w'", "[2, 3]", "24"});
  // Overlapping tensors.
  with_header(R"({"u":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"v":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})");
  expect_error([&] { SafetensorsFile f(p); }, {"g.safetensors", "'u'", "'v'", "overlap"});
}

TEST(Safetensors, UnsupportedDtypeNamesTensor) {
  TempDir dir;
  std::vector<RawTensor> ts = {tensor("ok", "F32", {2}, 1), {"ids", "I64", {3}, random_bytes(24, 2)}};
  write_safetensors(dir / "d.safetensors", ts);
  expect_error([&] { SafetensorsFile f(dir / "d.safetensors"); }, {"d.safetensors", "'ids'", "I64"});
  ts = {{"q", "F8_E5M2", {4}, random_bytes(4, 3)}};  // only e4m3 is a checkpoint format we load
  write_safetensors(dir / "d.safetensors", ts);
  expect_error([&] { SafetensorsFile f(dir / "d.safetensors"); }, {"'q'", "F8_E5M2"});
}

TEST(Safetensors, Fp8E4M3TensorsReadAndWriteOneBytePerElement) {
  TempDir dir;
  const std::vector<RawTensor> ts = {{"w", "F8_E4M3", {3, 5}, random_bytes(15, 4)}, tensor("s", "F32", {1, 1}, 5)};
  write_safetensors(dir / "d.safetensors", ts);
  const SafetensorsFile f(dir / "d.safetensors");
  EXPECT_EQ(f.info("w").dtype, DType::kF8E4M3);
  EXPECT_EQ(f.info("w").nbytes, 15u);
  EXPECT_EQ(std::memcmp(f.info("w").data, ts[0].bytes.data(), 15), 0);
  // Our writer: the same bytes back through the independent reader.
  nanovllm::write_safetensors(dir / "e.safetensors", {{"w", DType::kF8E4M3, Shape{3, 5}, ts[0].bytes.data()}});
  const auto back = read_safetensors(dir / "e.safetensors");
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].dtype, "F8_E4M3");
  EXPECT_EQ(back[0].bytes, ts[0].bytes);
}

TEST(SafetensorsCheckpoint, SingleFileAndShards) {
  TempDir dir;
  const auto ts = sample();
  write_safetensors(dir / "model.safetensors", ts);
  {
    const SafetensorsCheckpoint ck(dir.path());
    EXPECT_EQ(ck.num_files(), 1u);
    EXPECT_EQ(ck.names().size(), ts.size());
    for (const RawTensor& t : ts) expect_same(ck.info(t.name), t);
    expect_error([&] { ck.info("lm_head.weight"); }, {"lm_head.weight", dir.path().string()});
  }
  // Sharded: the index wins over a stray single file.
  write_safetensors(dir / "model-00001-of-00002.safetensors", {ts[0], ts[1]});
  write_safetensors(dir / "model-00002-of-00002.safetensors", {ts[2], ts[3], ts[4]});
  nlohmann::json map;
  for (int i = 0; i < 5; ++i)
    map[ts[static_cast<size_t>(i)].name] = i < 2 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  write_file(dir / "model.safetensors.index.json", nlohmann::json{{"metadata", {{"total_size", 1}}}, {"weight_map", map}}.dump());
  fs::remove(dir / "model.safetensors");
  const SafetensorsCheckpoint ck(dir.path());
  EXPECT_EQ(ck.num_files(), 2u);
  for (const RawTensor& t : ts) expect_same(ck.info(t.name), t);
  EXPECT_EQ(ck.info("b.f16").file, dir / "model-00002-of-00002.safetensors");
}

TEST(SafetensorsCheckpoint, ShardErrors) {
  TempDir dir;
  const auto ts = sample();
  expect_error([&] { SafetensorsCheckpoint ck(dir.path()); }, {"model.safetensors", dir.path().string()});
  write_safetensors(dir / "a.safetensors", {ts[0]});
  nlohmann::json map = {{ts[0].name, "a.safetensors"}, {ts[1].name, "b.safetensors"}};
  write_file(dir / "model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
  expect_error([&] { SafetensorsCheckpoint ck(dir.path()); }, {"b.safetensors", "missing", ts[1].name});
  map = {{ts[0].name, "a.safetensors"}, {ts[1].name, "a.safetensors"}};
  write_file(dir / "model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
  expect_error([&] { SafetensorsCheckpoint ck(dir.path()); }, {"a.safetensors", ts[1].name});
  map = {{ts[0].name, "../a.safetensors"}};
  write_file(dir / "model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
  expect_error([&] { SafetensorsCheckpoint ck(dir.path()); }, {"../a.safetensors"});
  write_file(dir / "model.safetensors.index.json", "{\"weight_map\": ");
  expect_error([&] { SafetensorsCheckpoint ck(dir.path()); }, {"model.safetensors.index.json", "JSON"});
  // A corrupt shard's error names the shard.
  std::string bad = safetensors_bytes(safetensors_header({ts[0]}), {ts[0]});
  bad.resize(bad.size() - 1);
  write_file(dir / "a.safetensors", bad);
  map = {{ts[0].name, "a.safetensors"}};
  write_file(dir / "model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
  expect_error([&] { SafetensorsCheckpoint ck(dir.path()); }, {"a.safetensors", ts[0].name, "truncated"});
}

TEST(SafetensorsCheckpoint, DuplicateTensorAcrossUnindexedFiles) {
  TempDir dir;
  const auto ts = sample();
  write_safetensors(dir / "one.safetensors", {ts[0], ts[1]});
  write_safetensors(dir / "two.safetensors", {ts[1]});
  expect_error([&] { SafetensorsCheckpoint ck(dir.path()); }, {ts[1].name, "one.safetensors", "two.safetensors"});
  fs::remove(dir / "two.safetensors");
  EXPECT_EQ(SafetensorsCheckpoint(dir.path()).names().size(), 2u);
}

TEST(Safetensors, WriterRoundTripsThroughTheIndependentReader) {
  TempDir dir;
  const auto ts = sample();
  std::vector<SafetensorsEntry> entries;
  for (const RawTensor& t : ts) {
    Shape s;
    s.ndim = static_cast<int>(t.shape.size());
    for (size_t d = 0; d < t.shape.size(); ++d) s.dims[d] = t.shape[d];
    const DType dt = t.dtype == "F32" ? DType::kF32 : t.dtype == "F16" ? DType::kF16 : DType::kBF16;
    entries.push_back({t.name, dt, s, t.bytes.data()});
  }
  nanovllm::write_safetensors(dir / "w.safetensors", entries, {{"format", "test"}, {"token_ids", "1,2"}});
  const auto back = read_safetensors(dir / "w.safetensors");
  ASSERT_EQ(back.size(), ts.size());
  for (const RawTensor& t : ts) {
    const RawTensor& b = find_tensor(back, t.name);
    EXPECT_EQ(b.dtype, t.dtype) << t.name;
    EXPECT_EQ(b.shape, t.shape) << t.name;
    EXPECT_EQ(b.bytes, t.bytes) << t.name;
  }
  const std::string file = read_file(dir / "w.safetensors");
  EXPECT_NE(file.find("\"__metadata__\":{\"format\":\"test\",\"token_ids\":\"1,2\"}"), std::string::npos);
  const SafetensorsFile f(dir / "w.safetensors");  // and through the product reader
  for (const RawTensor& t : ts) expect_same(f.info(t.name), t);

  entries.push_back(entries[0]);
  expect_error([&] { nanovllm::write_safetensors(dir / "d.safetensors", entries); },
               {"model.embed_tokens.weight", "twice"});
  const int32_t ids[2] = {1, 2};
  entries.back() = {"ids", DType::kI32, Shape{2}, ids};
  expect_error([&] { nanovllm::write_safetensors(dir / "i.safetensors", entries); }, {"'ids'", "I32"});
  expect_error([&] { nanovllm::write_safetensors(dir / "no-such-dir" / "x.safetensors", {}); }, {"cannot write"});
}
