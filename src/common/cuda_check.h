// anyep/src/common/cuda_check.h — the one check of a CUDA runtime call's status in host code: a
// failure becomes anyep::CudaError with context. Host code of GPU builds only (CUDA, or HIP
// through gpu_runtime.h).
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"
#include "common/gpu_runtime.h"

namespace anyep {

// Throws CudaError("<where>: <what>: <CUDA's message>") unless e is cudaSuccess. `where` names the
// component or buffer ("anyep LL", "anyep HT region"), `what` the call or step. Views, so a
// successful check (launches, every call) builds no string.
inline void cuda_check(cudaError_t e, std::string_view where, std::string_view what) {
  if (e == cudaSuccess) [[likely]]
    return;
  std::string m(where);
  m += ": ";
  m += what;
  m += ": ";
  m += cudaGetErrorString(e);
  throw CudaError(m);
}

}  // namespace anyep
