// tests/gpu/gpu_count.h — when a GPU test may skip: only when this machine has no CUDA device
// (cudaErrorNoDevice, cudaErrorInsufficientDriver: no driver, or 0 devices) or fewer GPUs than the
// test's world needs; the skip says which. Any other cudaGetDeviceCount error (a broken driver, a
// device in a bad state) fails the test: it is not a machine without GPUs.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "common/gpu_runtime.h"

namespace anyep::gputest {

struct GpuCount {
  int n = 0;
  cudaError_t err = cudaSuccess;
};

inline GpuCount count_gpus() {
  GpuCount g;
  g.err = cudaGetDeviceCount(&g.n);
  if (g.err != cudaSuccess) {
    cudaGetLastError();  // clear it, so that it is not reported by a later call
    g.n = 0;
  }
  return g;
}

inline bool means_no_device(cudaError_t e) {
  return e == cudaSuccess || e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver;
}

inline std::string gpu_count_text(const GpuCount& g) {
  if (g.err != cudaSuccess)
    return std::string("no " ANYEP_GPU_RUNTIME_NAME " device: cudaGetDeviceCount returned ") + cudaGetErrorName(g.err) +
           " (" + cudaGetErrorString(g.err) + ")";
  return std::to_string(g.n) + " " ANYEP_GPU_RUNTIME_NAME " device(s)";
}

}  // namespace anyep::gputest

// In a test body: fail on an unexpected cudaGetDeviceCount error; skip, saying why, with fewer
// than k GPUs.
#define ANYEP_REQUIRE_GPUS(k)                                                                                       \
  do {                                                                                                              \
    const ::anyep::gputest::GpuCount g_ = ::anyep::gputest::count_gpus();                                           \
    if (!::anyep::gputest::means_no_device(g_.err)) {                                                               \
      FAIL() << "cudaGetDeviceCount failed with " << cudaGetErrorName(g_.err) << " (" << cudaGetErrorString(g_.err) \
             << "): not a machine without GPUs, so not a skip";                                                     \
    }                                                                                                               \
    if (g_.n < (k)) {                                                                                               \
      GTEST_SKIP() << "needs " << (k) << " " ANYEP_GPU_RUNTIME_NAME " GPU(s), found "                               \
                   << ::anyep::gputest::gpu_count_text(g_);                                                         \
    }                                                                                                               \
  } while (0)
