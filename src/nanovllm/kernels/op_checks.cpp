#include "nanovllm/kernels/op_checks.h"

namespace nanovllm::ops {

bool is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

void check_tensor(std::string_view op, std::string_view name, const TensorView& t, Device dev, int ndim) {
  NANOVLLM_CHECK(t.defined(), op, ": ", name, " is undefined");
  NANOVLLM_CHECK(t.device() == dev, op, ": ", name, " is on ", to_string(t.device()), " but the op runs on ",
                 to_string(dev), " (all tensors of an op must be on one device)");
  NANOVLLM_CHECK(t.ndim() == ndim, op, ": ", name, " must have rank ", ndim, ", got shape ", t.shape().str());
}

void check_float(std::string_view op, std::string_view name, const TensorView& t) {
  NANOVLLM_CHECK(is_float(t.dtype()), op, ": ", name, " must be F32, BF16 or F16, got ", dtype_name(t.dtype()));
}

void check_i32(std::string_view op, std::string_view name, const TensorView& t) {
  NANOVLLM_CHECK(t.dtype() == DType::kI32, op, ": ", name, " must be I32, got ", dtype_name(t.dtype()));
}

void check_shape(std::string_view op, std::string_view name, const TensorView& t, Shape expected) {
  NANOVLLM_CHECK(t.shape() == expected, op, ": ", name, " has shape ", t.shape().str(), ", expected ",
                 expected.str());
}

void check_float_tensor(std::string_view op, std::string_view name, const TensorView& t, Device dev, Shape shape) {
  check_tensor(op, name, t, dev, shape.ndim);
  check_float(op, name, t);
  check_shape(op, name, t, shape);
}

void check_i32_tensor(std::string_view op, std::string_view name, const TensorView& t, Device dev, Shape shape) {
  check_tensor(op, name, t, dev, shape.ndim);
  check_i32(op, name, t);
  check_shape(op, name, t, shape);
}

#if !NANOVLLM_WITH_CUDA
[[noreturn]] void no_cuda(std::string_view op, Device dev) {
  NANOVLLM_FAIL(op, ": tensors are on ", to_string(dev),
                " but nano-vLLM was built without CUDA (configure with -DNANOVLLM_CUDA=ON)");
}
#endif

}  // namespace nanovllm::ops
