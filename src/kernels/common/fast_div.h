// anyep/src/kernels/common/fast_div.h — division by a divisor fixed before a kernel starts (the number
// of ranks), as a multiply-high, an add and a shift: a division by a run-time value is about 20
// dependent instructions on a GPU, and the LL dispatch receive divides right before its first load.
#pragma once

#include <cstdint>

#include "common/portability.h"

namespace anyep {

// n / d and n % d for 0 <= n < 2^31, 1 <= d < 2^31. Division by an invariant integer, rounding
// the reciprocal up: with s = ceil(log2 d) and m = floor(2^32 * (2^s - d) / d) + 1 (< 2^32),
// n / d = (mulhi(n, m) + n) >> s; mulhi(n, m) <= n, so the sum fits 32 bits for n < 2^31.
// Checked against `/` in tests/unit/kernels/test_fast_div.cpp. Built on the host (the constructor
// loops), used on the device.
struct FastDiv {
  uint32_t d = 1, magic = 1, shift = 0;  // d = 1: mulhi(n, 1) = 0, so the quotient is n

  FastDiv() = default;
  ANYEP_HD constexpr explicit FastDiv(uint32_t divisor) : d(divisor) {
    while ((1ull << shift) < d) ++shift;
    magic = static_cast<uint32_t>((1ull << 32) * ((1ull << shift) - d) / d + 1);
  }
  ANYEP_HD ANYEP_INLINE constexpr int div(int n) const {
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(static_cast<uint32_t>(n)) * magic) >> 32);
    return static_cast<int>((hi + static_cast<uint32_t>(n)) >> shift);
  }
  ANYEP_HD ANYEP_INLINE constexpr int mod(int n, int q) const { return n - q * static_cast<int>(d); }  // q = div(n)
};

}  // namespace anyep
