// The small device interface the layer-wise offload driver (offload_runner.h) runs on: memory, copy
// queues and events. CUDA (offload/cuda/cuda_offload_device.h): queues are streams, events are CUDA
// events, copies are cudaMemcpyAsync. CPU (make_cpu_offload_device): kernels run at once on the
// compute queue; copies on the other queues are deferred to the latest point the recorded events allow,
// and every access is checked against the events with vector clocks, so CI catches both a copy that
// is waited for too late (wrong data) and two accesses the events leave unordered (a race on a GPU).
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "nanovllm/core/tensor.h"
#include "nanovllm/kernels/copy_ops.h"
#include "nanovllm/kernels/ops.h"

namespace nanovllm {

enum class CopyKind { kH2D, kD2H, kD2D };

class OffloadDevice {
 public:
  using Queue = int;  // kCompute or an id from create_queue()
  using Event = int;  // an id from create_event()
  static constexpr Queue kCompute = 0;  // the runner's compute stream: every kernel runs there

  virtual ~OffloadDevice() = default;

  virtual Device device() const = 0;
  virtual Allocator& device_allocator() = 0;  // layer buffers, decode buffers, hidden states
  virtual Allocator& host_allocator() = 0;    // the host KV pool and staging (pinned on CUDA)
  virtual ops::Stream compute_stream() const = 0;

  virtual Queue create_queue() = 0;
  virtual Event create_event() = 0;

  // Stream-ordered copy of `bytes` on queue q. `what` names it in race reports (CPU checker).
  virtual void copy(void* dst, const void* src, size_t bytes, CopyKind kind, Queue q, const char* what) = 0;
  // Device-to-device copies on the compute queue (destinations overlap neither each other nor a source). CUDA: one
  // kernel (ops::copy_batch) instead of a cudaMemcpyAsync each.
  virtual void copy_batch_d2d(std::span<const ops::ByteCopy> copies, const char* what) {
    for (const ops::ByteCopy& c : copies) copy(c.dst, c.src, c.bytes, CopyKind::kD2D, kCompute, what);
  }
  // cudaEventRecord / cudaStreamWaitEvent semantics: a wait sees the latest record issued before it;
  // waiting on a never-recorded event is a no-op.
  virtual void record(Event e, Queue q) = 0;
  virtual void wait(Queue q, Event e) = 0;
  // Declares that kernels issued on q from now on read (or write) [p, p + bytes): checked against the
  // copies by the CPU race checker, nothing on CUDA.
  virtual void note_access(const void* p, size_t bytes, bool write, Queue q, const char* what) {
    (void)p, (void)bytes, (void)write, (void)q, (void)what;
  }
  // Host waits for every queue (teardown, freeing host memory, benchmarks). Not used inside a step.
  virtual void synchronize() = 0;
};

struct CpuOffloadDeviceOptions {
  bool defer_copies = true;  // false: copies run at once (synchronous memcpy, events are no-ops)
  bool check_races = true;   // vector-clock check of every copy and noted kernel access
};

std::unique_ptr<OffloadDevice> make_cpu_offload_device(CpuOffloadDeviceOptions options = {});

}  // namespace nanovllm
