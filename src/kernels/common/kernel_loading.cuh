// anyep/src/kernels/common/kernel_loading.cuh — the helper each kernel file's preload_*() uses
// (preload.h says why kernels are loaded up front).
#pragma once

#include "common/gpu_runtime.h"

namespace anyep {

// Referencing a kernel through the runtime (its attributes) makes the runtime load it now.
template <class... Kernels>
cudaError_t load_functions(Kernels... kernels) {
  cudaError_t e = cudaSuccess;
  cudaFuncAttributes attr;
  ((e = e == cudaSuccess ? cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(kernels)) : e), ...);
  return e;
}

}  // namespace anyep
