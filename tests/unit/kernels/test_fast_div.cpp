// FastDiv (kernels/common/fast_div.h): quotient and remainder equal to `/` and `%` over the whole range
// it promises, exhaustively where the divisor is small (ranks) and at the edges otherwise.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/common/fast_div.h"

namespace anyep {
namespace {

void expect_divides(uint32_t d, int n) {
  const FastDiv f(d);
  const int q = f.div(n);
  ASSERT_EQ(q, n / static_cast<int>(d)) << n << " / " << d << " (magic " << f.magic << ", shift " << f.shift << ")";
  ASSERT_EQ(f.mod(n, q), n % static_cast<int>(d)) << n << " % " << d;
}

TEST(FastDiv, EveryRankCountOverTheRegionRange) {
  // Divisors up to 1024 ranks, every numerator up to 2^16 (regions, experts, tokens).
  for (uint32_t d = 1; d <= 1024; ++d)
    for (int n = 0; n < (1 << 16); ++n) expect_divides(d, n);
}

TEST(FastDiv, EdgesOfTheRange) {
  const int top = INT32_MAX;  // n < 2^31
  std::vector<uint32_t> ds = {
      1, 2, 3, 5, 7, 255, 256, 257, 65535, 65536, 65537, 1u << 30, (1u << 30) + 1, (1u << 31) - 1};
  for (uint32_t d : ds)
    for (int n : {0, 1, static_cast<int>(d) - 1, static_cast<int>(d > 1 ? d : 2), top, top - 1, top / 2,
                  top - static_cast<int>(d) + 1})
      if (n >= 0) expect_divides(d, n);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t d = 1 + static_cast<uint32_t>(rng() % static_cast<uint64_t>(top));
    expect_divides(d, static_cast<int>(rng() % (static_cast<uint64_t>(top) + 1)));
  }
}

TEST(FastDiv, MagicOfPowersOfTwoIsAShift) {
  for (uint32_t s = 0; s < 31; ++s) {
    const FastDiv f(1u << s);
    EXPECT_EQ(f.shift, s);
    EXPECT_EQ(f.magic, 1u);
  }
}

}  // namespace
}  // namespace anyep
