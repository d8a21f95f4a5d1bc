// The pieces both probes share: a kernel that spins until a host flag is set (or a timeout), a
// non-blocking stream, and a millisecond clock for the host calls.
#pragma once

#include <chrono>
#include <cstdint>

#include "common/gpu_runtime.h"
#include "common/portability.h"

__global__ void spin(volatile int* flag, unsigned long long timeout_ns, int* timed_out) {
  const uint64_t t0 = anyep::port::now_ns();
  while (*flag == 0) {
    if (anyep::port::now_ns() - t0 > timeout_ns) {
      *timed_out = 1;
      return;
    }
  }
}

inline cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  return s;
}

using clk = std::chrono::steady_clock;
static double ms(clk::time_point a) { return std::chrono::duration<double, std::milli>(clk::now() - a).count(); }
