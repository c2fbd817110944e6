#include "nanovllm/core/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>
#include <sstream>

namespace nanovllm {

std::string to_string(Device d) {
  return d.is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

Shape::Shape(std::initializer_list<int64_t> d) {
  NANOVLLM_CHECK(d.size() <= static_cast<size_t>(kMaxDims), "tensor rank ", d.size(), " > ", kMaxDims);
  for (int64_t v : d) {
    NANOVLLM_CHECK(v >= 0, "negative dimension ", v);
    dims[static_cast<size_t>(ndim++)] = v;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[static_cast<size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (ndim != o.ndim) return false;
  for (int i = 0; i < ndim; ++i)
    if (dims[static_cast<size_t>(i)] != o.dims[static_cast<size_t>(i)]) return false;
  return true;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < ndim; ++i) os << (i ? ", " : "") << dims[static_cast<size_t>(i)];
  os << ']';
  return os.str();
}

TensorView TensorView::reshape(Shape s) const {
  NANOVLLM_CHECK(s.numel() == numel(), "reshape ", shape_.str(), " -> ", s.str(), " changes numel");
  return TensorView(data_, dtype_, s, device_);
}

TensorView TensorView::slice_rows(int64_t begin, int64_t end) const {
  NANOVLLM_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= dim(0), "slice_rows [", begin, ", ",
                 end, ") out of ", shape_.str());
  Shape s = shape_;
  s.dims[0] = end - begin;
  const size_t row_bytes = dim(0) ? nbytes() / static_cast<size_t>(dim(0)) : 0;
  return TensorView(static_cast<char*>(data_) + static_cast<size_t>(begin) * row_bytes, dtype_, s, device_);
}

namespace {
// Buffers of kMapBytes or more are mapped pages of their own, as glibc's malloc gives them past its mmap threshold.
// Mapping them here keeps them out of the sanitizers' allocator: under ASan a CPU engine's 2 GiB KV cache through
// malloc cost ~2 s per engine (its 256 MiB of shadow written at allocation and at free), most of a CLI test's process.
// Such a buffer has no redzones then, but a KV cache or workspace has none between its own blocks either.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kMapBytes = size_t{64} << 20;
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    if (bytes >= kMapBytes) {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      NANOVLLM_CHECK(p != MAP_FAILED, "out of host memory mapping ", bytes, " bytes");
      return p;
    }
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    NANOVLLM_CHECK(p != nullptr, "out of host memory allocating ", bytes, " bytes");
    return p;
  }
  void deallocate(void* p, size_t bytes) override {
    if (bytes >= kMapBytes) {
      ::munmap(p, bytes);
      return;
    }
    std::free(p);
  }
  Device device() const override { return Device::cpu(); }
};
}  // namespace

Allocator& cpu_allocator() {
  static CpuAllocator alloc;
  return alloc;
}

Buffer::Buffer(Allocator& alloc, size_t bytes) : alloc_(&alloc), bytes_(bytes), shape_({static_cast<int64_t>(bytes)}) {
  data_ = alloc.allocate(bytes);
}

Buffer::Buffer(Allocator& alloc, DType dtype, Shape shape)
    : alloc_(&alloc), bytes_(static_cast<size_t>(shape.numel()) * dtype_size(dtype)), dtype_(dtype), shape_(shape) {
  data_ = alloc.allocate(bytes_);
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& o) noexcept
    : alloc_(o.alloc_), data_(o.data_), bytes_(o.bytes_), dtype_(o.dtype_), shape_(o.shape_) {
  o.alloc_ = nullptr;
  o.data_ = nullptr;
  o.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    alloc_ = o.alloc_; data_ = o.data_; bytes_ = o.bytes_; dtype_ = o.dtype_; shape_ = o.shape_;
    o.alloc_ = nullptr; o.data_ = nullptr; o.bytes_ = 0;
  }
  return *this;
}

void Buffer::release() {
  if (alloc_ && data_) alloc_->deallocate(data_, bytes_);
  data_ = nullptr;
}

TensorView Buffer::view(DType dtype, Shape shape) const {
  NANOVLLM_CHECK(static_cast<size_t>(shape.numel()) * dtype_size(dtype) <= bytes_, "view ", shape.str(), " ",
                 dtype_name(dtype), " exceeds buffer of ", bytes_, " bytes");
  return TensorView(data_, dtype, shape, device());
}

}  // namespace nanovllm
