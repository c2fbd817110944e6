// ByteWriter / ByteReader: the flat binary form of the messages between the nodes of a tensor-parallel
// group (step_codec.h, rendezvous.h). Plain values are stored as their bytes (every node is the same
// build on the same kind of host: the bootstrap checks the build), vectors and strings with a length.
// The reader checks every length against what is left, so a truncated or foreign message is a clear
// error, never a read past the end.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "nanovllm/core/error.h"

namespace nanovllm {

class ByteWriter {
 public:
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  template <typename T>
  void put_vector(const T* data, size_t n) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<uint64_t>(n);
    bytes_.append(reinterpret_cast<const char*>(data), n * sizeof(T));
  }
  template <typename T>
  void put_vector(const std::vector<T>& v) {
    put_vector(v.data(), v.size());
  }
  void put_string(std::string_view s) { put_vector(s.data(), s.size()); }

  const std::string& bytes() const { return bytes_; }
  std::string take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class ByteReader {
 public:
  // `what` names the message in errors ("step message", "hello").
  ByteReader(std::string_view bytes, const char* what) : bytes_(bytes), what_(what) {}

  template <typename T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    need(sizeof(T));
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <typename T>
  std::vector<T> get_vector() {
    const uint64_t n = get<uint64_t>();
    NANOVLLM_CHECK(n <= (bytes_.size() - pos_) / sizeof(T), what_, ": a list of ", n, " items overruns the ",
                   bytes_.size(), "-byte message");
    std::vector<T> v(static_cast<size_t>(n));
    if (n > 0) std::memcpy(v.data(), bytes_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  std::string get_string() {
    const std::vector<char> c = get_vector<char>();
    return std::string(c.begin(), c.end());
  }
  bool done() const { return pos_ == bytes_.size(); }
  // Throws unless every byte was read (a message from another version of the protocol).
  void expect_done() const {
    NANOVLLM_CHECK(done(), what_, ": ", bytes_.size() - pos_, " bytes left over of ", bytes_.size());
  }

 private:
  void need(size_t n) const {
    NANOVLLM_CHECK(n <= bytes_.size() - pos_, what_, ": truncated (", bytes_.size(), " bytes, needed ", pos_ + n, ")");
  }
  std::string_view bytes_;
  const char* what_;
  size_t pos_ = 0;
};

}  // namespace nanovllm
