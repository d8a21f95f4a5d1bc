// The software BF16/FP8 conversions of common/portability.h (what AMD GPUs run) against NVIDIA's
// conversion instructions (what the CUDA kernels run), over all 2^32 float bit patterns: the
// same codes for every non-NaN input, a NaN code for every NaN. Skips without a GPU and in HIP
// builds (both sides are the software there; tests/unit/common checks it against a reference).
#include <gtest/gtest.h>

#include <cstdio>

#include "../gpu_count.h"
#include "common/gpu_runtime.h"
#include "number_format_kernels.h"

namespace {

using anyep::gputest::FormatMismatches;

#define CUDA_OK(x)                                                      \
  do {                                                                  \
    cudaError_t e_ = (x);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #x << ": " << cudaGetErrorString(e_); \
  } while (0)

TEST(NumberFormatsGpu, SoftwareMatchesToolkitOnEveryFloat) {
#if defined(ANYEP_GPU_HIP)
  GTEST_SKIP() << "HIP build: port::float2_to_* is the software conversion itself, nothing to compare";
#endif
  ANYEP_REQUIRE_GPUS(1);
  CUDA_OK(cudaSetDevice(0));
  FormatMismatches* d = nullptr;
  CUDA_OK(cudaMalloc(&d, sizeof(FormatMismatches)));
  CUDA_OK(cudaMemset(d, 0, sizeof(FormatMismatches)));
  CUDA_OK(anyep::gputest::launch_compare_formats(0, uint64_t{1} << 32, d, nullptr));
  FormatMismatches h{};
  CUDA_OK(cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(d));
  std::printf(
      "2^32 floats: fp8 e4m3 differ on %llu non-NaN inputs, %llu NaN inputs not NaN, %llu NaN codes differ in "
      "sign; bf16 differ on %llu non-NaN inputs, %llu NaN inputs not NaN\n",
      h.fp8, h.fp8_nan, h.fp8_nan_bits, h.bf16, h.bf16_nan);
  EXPECT_EQ(h.fp8, 0u) << "e.g. float bits 0x" << std::hex << h.first_fp8_input;
  EXPECT_EQ(h.fp8_nan, 0u);
  EXPECT_EQ(h.bf16, 0u) << "e.g. float bits 0x" << std::hex << h.first_bf16_input;
  EXPECT_EQ(h.bf16_nan, 0u);
}

}  // namespace
