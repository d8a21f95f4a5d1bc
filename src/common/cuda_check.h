// anyep/src/common/cuda_check.h — turn a failed CUDA runtime call into anyep::CudaError with
// context. Host code of GPU builds only (CUDA, or HIP through gpu_runtime.h).
#pragma once

#include <string>

#include "common/error.h"
#include "common/gpu_runtime.h"

namespace anyep {

// Throws CudaError("<where>: <what>: <CUDA's message>") unless e is cudaSuccess.
inline void cuda_check(cudaError_t e, const char* where, const std::string& what) {
  if (e != cudaSuccess) throw CudaError(std::string(where) + ": " + what + ": " + cudaGetErrorString(e));
}

}  // namespace anyep
