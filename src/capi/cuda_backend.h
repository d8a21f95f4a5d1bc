// anyep/src/capi/cuda_backend.h — what the C API's CUDA backends (ll_backend_cuda.cpp,
// ht_backend_cuda.cpp) share: the runtime buffer they own on one device and the group's teardown
// calls. destroy() called by the group reports errors; the destructor must not throw.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "capi/device_guard.h"
#include "common/cuda_check.h"

namespace anyep::capi {

template <class Backend, class Buffer>
class CudaBackend : public Backend {
 public:
  ~CudaBackend() override {
    try {
      destroy_buffer();
    } catch (...) {
      // Swallowed: an explicit destroy() has already reported what went wrong.
    }
  }
  void check_async() override { buf_->check_error(); }
  void synchronize() override {
    DeviceGuard guard(device_);
    cuda_check(cudaDeviceSynchronize(), "anyep", "synchronize before the group's destroy");
  }
  void destroy() override { destroy_buffer(); }

 protected:
  explicit CudaBackend(int device) : device_(device) {}

  int device_;
  std::unique_ptr<Buffer> buf_;

 private:
  // Not virtual: the destructor calls it.
  void destroy_buffer() {
    if (!buf_) return;
    DeviceGuard guard(device_);
    buf_->destroy();
  }
};

}  // namespace anyep::capi
