#include "number_format_kernels.h"

#include "common/portability.h"

namespace anyep::gputest {

__global__ void compare_formats_kernel(uint64_t begin, uint64_t count, FormatMismatches* out) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    const uint32_t bits = static_cast<uint32_t>(begin + i);
    const float f = port::bits_float(bits);
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    const uint8_t fp8_tool = static_cast<uint8_t>(port::float2_to_fp8x2_e4m3(f, 0.0f));
    const uint8_t fp8_soft = port::soft::fp8_e4m3_from_float(f);
    if (fp8_tool != fp8_soft) {
      if (!nan) {
        atomicAdd(&out->fp8, 1ull);
        out->first_fp8_input = bits;
      } else if ((fp8_tool & 0x7f) != 0x7f || (fp8_soft & 0x7f) != 0x7f) {
        atomicAdd(&out->fp8_nan, 1ull);
      } else {
        atomicAdd(&out->fp8_nan_bits, 1ull);
      }
    }
    const uint16_t bf16_tool = static_cast<uint16_t>(port::float2_to_bf16x2(f, 0.0f));
    const uint16_t bf16_soft = port::soft::bf16_from_float(f);
    if (bf16_tool != bf16_soft) {
      if (!nan) {
        atomicAdd(&out->bf16, 1ull);
        out->first_bf16_input = bits;
      } else if ((bf16_tool & 0x7fffu) <= 0x7f80u || (bf16_soft & 0x7fffu) <= 0x7f80u) {
        atomicAdd(&out->bf16_nan, 1ull);
      }
    }
  }
}

cudaError_t launch_compare_formats(uint64_t begin, uint64_t count, FormatMismatches* out, cudaStream_t s) {
  compare_formats_kernel<<<1024, 256, 0, s>>>(begin, count, out);
  return cudaGetLastError();
}

}  // namespace anyep::gputest
