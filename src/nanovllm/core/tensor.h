// TensorView: a non-owning, contiguous (row-major) view of typed memory on one device.
// Buffer: owning memory from an Allocator; hands out TensorViews.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "nanovllm/core/dtype.h"
#include "nanovllm/core/error.h"

namespace nanovllm {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::kCUDA, i}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool operator==(const Device&) const = default;
};

std::string to_string(Device d);

inline constexpr int kMaxDims = 5;

struct Shape {
  std::array<int64_t, kMaxDims> dims{};
  int ndim = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t operator[](int i) const { return dims[static_cast<size_t>(i < 0 ? ndim + i : i)]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[a, b, c]"
};

class TensorView {
 public:
  TensorView() = default;
  TensorView(void* data, DType dtype, Shape shape, Device device = Device::cpu())
      : data_(data), dtype_(dtype), shape_(shape), device_(device) {}

  void* data() const { return data_; }
  template <typename T> T* data_as() const { return static_cast<T*>(data_); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_[i]; }
  int ndim() const { return shape_.ndim; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  Device device() const { return device_; }
  bool defined() const { return data_ != nullptr || numel() == 0; }

  // Same memory, new shape with the same element count.
  TensorView reshape(Shape s) const;
  // Rows [begin, end) of the outermost dimension.
  TensorView slice_rows(int64_t begin, int64_t end) const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Device device_;
};

// Raw memory provider for one device (CPU heap, CUDA device memory, pinned host memory, …).
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) = 0;
  virtual Device device() const = 0;
};

// 64-byte aligned host heap memory.
Allocator& cpu_allocator();

// Owning, move-only allocation.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Allocator& alloc, size_t bytes);
  Buffer(Allocator& alloc, DType dtype, Shape shape);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return bytes_; }
  Device device() const { return alloc_ ? alloc_->device() : Device::cpu(); }
  // A view of the whole buffer (dtype/shape from the constructor, or given here).
  TensorView view() const { return TensorView(data_, dtype_, shape_, device()); }
  TensorView view(DType dtype, Shape shape) const;

 private:
  void release();
  Allocator* alloc_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  DType dtype_ = DType::kU8;
  Shape shape_;
};

}  // namespace nanovllm
