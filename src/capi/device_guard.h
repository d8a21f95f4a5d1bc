// anyep/src/capi/device_guard.h — the CUDA backends' scope guard: selects the group's device and
// restores the calling thread's current device on exit (the C caller's state is theirs).
#pragma once

#include <cuda_runtime_api.h>

#include "common/cuda_check.h"

namespace anyep::capi {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&prev_) != cudaSuccess) prev_ = -1;
    cuda_check(cudaSetDevice(device), "anyep", "cudaSetDevice");
  }
  ~DeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

}  // namespace anyep::capi
