// anyep/python/csrc/tensor_convert.h — torch tensors to the runtime's tensor descriptors
// (src/runtime/common/tensor_ref.h) and back: descriptors of inputs, allocations of outputs as the
// runtime specifies them, the launch stream. Shared by the LL and HT bindings.
#pragma once

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "runtime/common/tensor_ref.h"

namespace anyep::ext {

runtime::DType dtype_of(at::ScalarType t);
at::ScalarType scalar_type_of(runtime::DType t);
// The descriptor of a tensor (an undefined tensor or nullopt: an absent argument). `name` is used
// in errors.
runtime::TensorRef ref(const at::Tensor& t, const char* name);
runtime::TensorRef ref(const std::optional<at::Tensor>& t, const char* name);
// An output as the runtime describes it: a fresh allocation of storage_elems, viewed with the
// spec's shape and strides from its start, with `like`'s device (torch's current stream).
at::Tensor allocate(const runtime::OutputSpec& s, const at::TensorOptions& like);
// The stream a call launches on: `launch_stream` (a cudaStream_t as an integer), or the current
// stream when 0.
cudaStream_t stream_or_current(uintptr_t launch_stream);

}  // namespace anyep::ext
