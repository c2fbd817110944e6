#include "nanovllm/parallel/cuda/nccl_communicator.h"

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
  if (peer_ != nullptr && data.dtype() == DType::kBF16 && peer_->fits(data.numel())) {
    peer_->all_reduce_sum_bf16(rank_, data.data(), data.numel(), stream_of(s));
    return;
  }
  const ncclDataType_t type = nccl_type(data.dtype(), "all_reduce_sum");
  NCCL_CHECK(ncclAllReduce(data.data(), data.data(), static_cast<size_t>(data.numel()), type, ncclSum, comm_,
                           stream_of(s)));
}

void NcclCommunicator::all_reduce_add_rms_norm(TensorView x, TensorView residual, TensorView weight, float eps,
                                               ops::Stream s) {
  const bool bf16 = x.dtype() == DType::kBF16 && residual.dtype() == DType::kBF16 && weight.dtype() == DType::kBF16;
  if (peer_ == nullptr || !bf16 || x.ndim() != 2 || residual.shape() != x.shape() || weight.numel() != x.dim(1) ||
      !peer_->fits_rows(x.dim(0), x.dim(1))) {
    Communicator::all_reduce_add_rms_norm(x, residual, weight, eps, s);
    return;
  }
  peer_->all_reduce_add_rms_norm_bf16(rank_, x.data(), residual.data(), weight.data(), x.dim(0), x.dim(1), eps,
                                      stream_of(s));
}

void NcclCommunicator::all_gather(TensorView in, TensorView out, ops::Stream s) {
  NANOVLLM_CHECK(in.dtype() == out.dtype(), "all_gather: in is ", dtype_name(in.dtype()), ", out is ",
                 dtype_name(out.dtype()));
  NANOVLLM_CHECK(out.numel() == in.numel() * size_, "all_gather: out has ", out.numel(), " elements, expected ",
                 size_, " x ", in.numel());
  NCCL_CHECK(ncclAllGather(in.data(), out.data(), static_cast<size_t>(in.numel()), nccl_type(in.dtype(), "all_gather"),
                           comm_, stream_of(s)));
}

NcclGroup::NcclGroup(int size, size_t peer_bytes) {
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  NANOVLLM_CHECK(size >= 1 && size <= devices, "tensor_parallel_size ", size, " needs ", size,
                 " GPUs; this machine has ", devices);
  comms_.resize(static_cast<size_t>(size));
  std::vector<int> device_ids(static_cast<size_t>(size));
  std::iota(device_ids.begin(), device_ids.end(), 0);
  NCCL_CHECK(ncclCommInitAll(comms_.data(), size, device_ids.data()));
  if (peer_bytes > 0 && cuda_ops::PeerAllReduce::supported(size))
    peer_ = std::make_unique<cuda_ops::PeerAllReduce>(size, peer_bytes);
  for (int r = 0; r < size; ++r)
    ranks_.push_back(std::make_unique<NcclCommunicator>(comms_[static_cast<size_t>(r)], r, size, peer_.get()));
}

NcclGroup::NcclGroup(int local, int world, int first_rank, const ncclUniqueId& id) {
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  NANOVLLM_CHECK(local >= 1 && local <= devices, "tensor parallel: this node runs ", local, " ranks, which needs ",
                 local, " GPUs; it has ", devices);
  comms_.resize(static_cast<size_t>(local));
  // One thread creates every local communicator: inside a group call, ncclCommInitRank does not block
  // per device (NCCL's rule for several GPUs per thread).
  NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < local; ++r) {
    CUDA_CHECK(cudaSetDevice(r));
    NCCL_CHECK(ncclCommInitRank(&comms_[static_cast<size_t>(r)], world, id, first_rank + r));
  }
  NCCL_CHECK(ncclGroupEnd());
  for (int r = 0; r < local; ++r)
    ranks_.push_back(std::make_unique<NcclCommunicator>(comms_[static_cast<size_t>(r)], first_rank + r, world, nullptr));
}

NcclGroup::~NcclGroup() {
  if (aborted_) return;
  for (ncclComm_t c : comms_) ncclCommDestroy(c);
}

void NcclGroup::abort() {
  std::lock_guard lock(mu_);
  if (aborted_) return;
  aborted_ = true;
  if (peer_) peer_->abort();
  for (ncclComm_t c : comms_) ncclCommAbort(c);
}

}  // namespace nanovllm
