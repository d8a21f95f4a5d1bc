// anyep/src/common/cuda_check.h — turn a failed CUDA runtime call into anyep::CudaError with
// context. Host code of CUDA-enabled builds only.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "common/error.h"

namespace anyep {

// Throws CudaError("<where>: <what>: <CUDA's message>") unless e is cudaSuccess.
inline void cuda_check(cudaError_t e, const char* where, const std::string& what) {
  if (e != cudaSuccess) throw CudaError(std::string(where) + ": " + what + ": " + cudaGetErrorString(e));
}

}  // namespace anyep
