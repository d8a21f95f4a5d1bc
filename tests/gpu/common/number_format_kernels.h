// Kernels of test_number_formats_gpu (host side: plain C++).
#pragma once

#include <cstdint>

#include "common/gpu_runtime.h"

namespace anyep::gputest {

// What one comparison pass found (device memory; zero it before the launch).
struct FormatMismatches {
  unsigned long long fp8;           // non-NaN inputs where the two FP8 codes differ
  unsigned long long fp8_nan;       // NaN inputs where a side's FP8 code is not a NaN code
  unsigned long long fp8_nan_bits;  // NaN inputs where both are NaN codes but differ (sign)
  unsigned long long bf16;          // non-NaN inputs where the two BF16 values differ
  unsigned long long bf16_nan;      // NaN inputs where a side's BF16 value is not a NaN
  uint32_t first_fp8_input;         // one input of each kind that differed (valid if the count > 0)
  uint32_t first_bf16_input;
};

// Every float bit pattern in [begin, begin + count): the toolkit's conversion (port::float2_to_*)
// against port::soft::*.
cudaError_t launch_compare_formats(uint64_t begin, uint64_t count, FormatMismatches* out, cudaStream_t s);

}  // namespace anyep::gputest
