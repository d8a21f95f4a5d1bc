// anyep/python/csrc/tensor_convert.cpp — torch tensors <-> runtime tensor descriptors.
#include "tensor_convert.h"

#include <ATen/cuda/CUDAContext.h>

#include <string>

#include "common/error.h"

namespace anyep::ext {

using anyep::InvalidArgument;
namespace rt = anyep::runtime;

rt::DType dtype_of(at::ScalarType t) {
  switch (t) {
    case at::ScalarType::Bool:
      return rt::DType::kBool;
    case at::ScalarType::Byte:
      return rt::DType::kUInt8;
    case at::ScalarType::Char:
      return rt::DType::kInt8;
    case at::ScalarType::Short:
      return rt::DType::kInt16;
    case at::ScalarType::Int:
      return rt::DType::kInt32;
    case at::ScalarType::Long:
      return rt::DType::kInt64;
    case at::ScalarType::Half:
      return rt::DType::kFloat16;
    case at::ScalarType::BFloat16:
      return rt::DType::kBFloat16;
    case at::ScalarType::Float:
      return rt::DType::kFloat32;
    case at::ScalarType::Double:
      return rt::DType::kFloat64;
    case at::ScalarType::Float8_e4m3fn:
      return rt::DType::kFloat8_e4m3fn;
    case at::ScalarType::Float8_e5m2:
      return rt::DType::kFloat8_e5m2;
    default:
      return rt::DType::kOther;
  }
}

at::ScalarType scalar_type_of(rt::DType t) {
  switch (t) {
    case rt::DType::kBool:
      return at::kBool;
    case rt::DType::kBFloat16:
      return at::kBFloat16;
    case rt::DType::kFloat8_e4m3fn:
      return at::kFloat8_e4m3fn;
    case rt::DType::kFloat32:
      return at::kFloat;
    case rt::DType::kInt32:
      return at::kInt;
    case rt::DType::kInt64:
      return at::kLong;
    default:
      break;
  }
  throw anyep::InternalError(std::string("anyep._C: no torch dtype for runtime output dtype ") + rt::dtype_name(t));
}

// The descriptor of a tensor (an undefined tensor: an absent argument).
rt::TensorRef ref(const at::Tensor& t, const char* name) {
  rt::TensorRef r;
  if (!t.defined()) return r;
  if (t.dim() > rt::kMaxDims)
    throw InvalidArgument(std::string(name) + " has " + std::to_string(t.dim()) + " dimensions, more than " +
                          std::to_string(rt::kMaxDims));
  r.data = t.data_ptr();
  r.dtype = dtype_of(t.scalar_type());
  r.ndim = static_cast<int>(t.dim());
  for (int d = 0; d < r.ndim; ++d) {
    r.shape[d] = t.size(d);
    r.strides[d] = t.stride(d);
  }
  r.device = t.is_cuda() ? t.get_device() : -1;
  r.storage_offset = t.storage_offset();
  r.storage_bytes = static_cast<int64_t>(t.storage().nbytes());
  return r;
}

rt::TensorRef ref(const std::optional<at::Tensor>& t, const char* name) { return t ? ref(*t, name) : rt::TensorRef{}; }

// An output as the runtime describes it: a fresh allocation of storage_elems, viewed with the
// spec's shape and strides from its start.
at::Tensor allocate(const rt::OutputSpec& s, const at::TensorOptions& like) {
  const auto opts = like.dtype(scalar_type_of(s.dtype));
  const at::IntArrayRef shape(s.shape, static_cast<size_t>(s.ndim)), strides(s.strides, static_cast<size_t>(s.ndim));
  if (s.storage_elems > s.numel()) return at::empty({s.storage_elems}, opts).as_strided(shape, strides);
  return at::empty_strided(shape, strides, opts);
}

// The stream a call launches on: `launch_stream` (a cudaStream_t as an integer, e.g.
// torch.cuda.Stream.cuda_stream: the Buffer's communication stream for async_finish) or, when
// 0, the current stream. Outputs are allocated on the current stream either way (as DeepEP's):
// the async caller keeps the tensors alive in its EventOverlap instead of record_stream, which
// CUDA graph capture does not allow.
cudaStream_t stream_or_current(uintptr_t launch_stream) {
  if (launch_stream != 0) return reinterpret_cast<cudaStream_t>(launch_stream);
  return at::cuda::getCurrentCUDAStream().stream();
}

}  // namespace anyep::ext
