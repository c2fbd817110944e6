#include "nanovllm/runner/cuda/nccl_communicator.h"

#include <numeric>

#include <cuda_runtime.h>

#include "nanovllm/core/error.h"
#include "nanovllm/kernels/cuda/cuda_check.h"

namespace nanovllm {
namespace {

ncclDataType_t nccl_type(DType t, const char* op) {
  switch (t) {
    case DType::kBF16: return ncclBfloat16;
    case DType::kF32: return ncclFloat32;
    case DType::kF16: return ncclFloat16;
    default: NANOVLLM_FAIL(op, ": NCCL collectives take bf16, f16 or f32, got ", dtype_name(t));
  }
}

cudaStream_t stream_of(ops::Stream s) { return static_cast<cudaStream_t>(s.cuda_stream); }

}  // namespace

void NcclCommunicator::all_reduce_sum(TensorView data, ops::Stream s) {
  const ncclDataType_t type = nccl_type(data.dtype(), "all_reduce_sum");
  NCCL_CHECK(ncclAllReduce(data.data(), data.data(), static_cast<size_t>(data.numel()), type, ncclSum, comm_,
                           stream_of(s)));
}

void NcclCommunicator::all_gather(TensorView in, TensorView out, ops::Stream s) {
  NANOVLLM_CHECK(in.dtype() == out.dtype(), "all_gather: in is ", dtype_name(in.dtype()), ", out is ",
                 dtype_name(out.dtype()));
  NANOVLLM_CHECK(out.numel() == in.numel() * size_, "all_gather: out has ", out.numel(), " elements, expected ",
                 size_, " x ", in.numel());
  NCCL_CHECK(ncclAllGather(in.data(), out.data(), static_cast<size_t>(in.numel()), nccl_type(in.dtype(), "all_gather"),
                           comm_, stream_of(s)));
}

NcclGroup::NcclGroup(int size) {
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  NANOVLLM_CHECK(size >= 1 && size <= devices, "tensor_parallel_size ", size, " needs ", size,
                 " GPUs; this machine has ", devices);
  comms_.resize(static_cast<size_t>(size));
  std::vector<int> device_ids(static_cast<size_t>(size));
  std::iota(device_ids.begin(), device_ids.end(), 0);
  NCCL_CHECK(ncclCommInitAll(comms_.data(), size, device_ids.data()));
  for (int r = 0; r < size; ++r)
    ranks_.push_back(std::make_unique<NcclCommunicator>(comms_[static_cast<size_t>(r)], r, size));
}

NcclGroup::~NcclGroup() {
  if (aborted_) return;
  for (ncclComm_t c : comms_) ncclCommDestroy(c);
}

void NcclGroup::abort() {
  std::lock_guard lock(mu_);
  if (aborted_) return;
  aborted_ = true;
  for (ncclComm_t c : comms_) ncclCommAbort(c);
}

}  // namespace nanovllm
