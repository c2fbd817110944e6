#include "nanovllm/offload/cuda/cuda_offload_device.h"

#include <vector>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/cuda_check.h"
#include "nanovllm/kernels/cuda/cuda_memory.h"

namespace nanovllm {
namespace {

cudaMemcpyKind to_cuda(CopyKind k) {
  switch (k) {
    case CopyKind::kH2D:
      return cudaMemcpyHostToDevice;
    case CopyKind::kD2H:
      return cudaMemcpyDeviceToHost;
    case CopyKind::kD2D:
      return cudaMemcpyDeviceToDevice;
  }
  return cudaMemcpyDefault;
}

class CudaOffloadDevice final : public OffloadDevice {
 public:
  CudaOffloadDevice(int device, ops::Stream compute) : device_(device), compute_(compute) {
    streams_.push_back(static_cast<cudaStream_t>(compute.cuda_stream));
  }
  ~CudaOffloadDevice() override {
    synchronize();
    for (size_t i = 1; i < streams_.size(); ++i) cudaStreamDestroy(streams_[i]);
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  Device device() const override { return Device::cuda(device_); }
  Allocator& device_allocator() override { return cuda_allocator(device_); }
  Allocator& host_allocator() override { return pinned_host_allocator(); }
  ops::Stream compute_stream() const override { return compute_; }

  Queue create_queue() override {
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    streams_.push_back(s);
    return static_cast<Queue>(streams_.size() - 1);
  }
  Event create_event() override {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events_.push_back(e);
    return static_cast<Event>(events_.size() - 1);
  }

  void copy(void* dst, const void* src, size_t bytes, CopyKind kind, Queue q, const char*) override {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, to_cuda(kind), stream(q)));
  }
  void copy_batch_d2d(std::span<const ops::ByteCopy> copies, const char*) override {
    ops::copy_batch(copies, device(), compute_);
  }
  void record(Event e, Queue q) override { CUDA_CHECK(cudaEventRecord(event(e), stream(q))); }
  void wait(Queue q, Event e) override { CUDA_CHECK(cudaStreamWaitEvent(stream(q), event(e), 0)); }
  void synchronize() override {
    for (cudaStream_t s : streams_) CUDA_CHECK(cudaStreamSynchronize(s));
  }

 private:
  cudaStream_t stream(Queue q) const {
    NANOVLLM_ASSERT(q >= 0 && static_cast<size_t>(q) < streams_.size(), "cuda offload device: bad queue ", q);
    return streams_[static_cast<size_t>(q)];
  }
  cudaEvent_t event(Event e) const {
    NANOVLLM_ASSERT(e >= 0 && static_cast<size_t>(e) < events_.size(), "cuda offload device: bad event ", e);
    return events_[static_cast<size_t>(e)];
  }

  int device_;
  ops::Stream compute_;                 // the runner's compute stream and kernel context (not owned)
  std::vector<cudaStream_t> streams_;  // [0] = the runner's compute stream (not owned)
  std::vector<cudaEvent_t> events_;
};

}  // namespace

std::unique_ptr<OffloadDevice> make_cuda_offload_device(int device, ops::Stream compute) {
  return std::make_unique<CudaOffloadDevice>(device, compute);
}

}  // namespace nanovllm
