// The software number conversions of common/portability.h (what AMD GPUs run, where ROCm 5.2 has
// no FP8 type): float -> FP8 e4m3 (round to nearest even, saturating, NaN kept) and float -> BF16
// (round to nearest even), checked against references written another way (nearest value in a
// table of every code; nearest of the two neighbours in double precision). Dense near every
// rounding boundary, plus random bit patterns. tests/gpu/common compares the same functions with
// NVIDIA's conversion instructions on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/portability.h"

namespace {

using anyep::port::bits_float;
using anyep::port::float_bits;
namespace soft = anyep::port::soft;

// Value of a non-negative e4m3 code 0x00..0x7e, computed in double.
double e4m3_value(int code) {
  const int e = code >> 3, m = code & 7;
  return e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
}

// Reference: the nearest of the 127 non-negative finite codes, ties to the even code; above
// 448 + 16 (half an ulp past the largest) saturates to 448; the sign is kept (also for 0 and NaN).
uint8_t e4m3_reference(float f) {
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  if (std::isnan(f)) return sign | 0x7f;
  const double a = std::fabs(static_cast<double>(f));
  if (a > 464.0) return sign | 0x7e;
  static const std::vector<double> values = [] {
    std::vector<double> v;
    for (int c = 0; c <= 0x7e; ++c) v.push_back(e4m3_value(c));
    return v;
  }();
  const auto it = std::lower_bound(values.begin(), values.end(), a);  // first value >= a
  int hi = static_cast<int>(it - values.begin());
  if (hi > 0x7e) hi = 0x7e;
  int best = hi;
  if (hi > 0) {
    const int lo = hi - 1;
    const double dlo = a - values[lo], dhi = values[hi] - a;
    best = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
  }
  return sign | static_cast<uint8_t>(best);
}

// Reference: the nearer of the two BF16 values around f (the larger magnitude one may be the
// infinity, counted as 2^128), ties to the even one; NaN is 0x7fff.
uint16_t bf16_reference(float f) {
  if (std::isnan(f)) return 0x7fff;
  const uint32_t u = float_bits(f);
  const uint32_t lo = u & 0xffff0000u;
  if (lo == u) return static_cast<uint16_t>(u >> 16);
  const uint32_t hi = lo + 0x10000u;  // next magnitude (same sign)
  auto mag = [](uint32_t b) {
    return (b & 0x7fffffffu) == 0x7f800000u ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(bits_float(b)));
  };
  const double a = std::fabs(static_cast<double>(f));
  const double dlo = a - mag(lo), dhi = mag(hi) - a;
  const uint32_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((lo >> 16) % 2 == 0 ? lo : hi);
  return static_cast<uint16_t>(pick >> 16);
}

// Floats near every rounding decision: all high bit patterns of the exponents that matter with
// a few low-bit endings (exact, just above/below the half-way point of the dropped bits), plus
// random bit patterns, both signs.
std::vector<float> dense_inputs(int keep_bits) {
  std::vector<float> v;
  const uint32_t drop = 23 - keep_bits;  // mantissa bits dropped by the conversion
  const uint32_t half = 1u << (drop - 1), low_mask = (1u << drop) - 1;
  const uint32_t endings[] = {0, 1, half - 1, half, half + 1, low_mask};
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t top = 0; top < (1u << (8 + keep_bits)); ++top)  // exponent and kept mantissa bits
      for (uint32_t end : endings) v.push_back(bits_float((sign << 31) | (top << drop) | end));
  std::mt19937 rng(12345);
  for (int i = 0; i < 1 << 20; ++i) v.push_back(bits_float(static_cast<uint32_t>(rng())));
  return v;
}

TEST(NumberFormats, Fp8E4m3RoundTripsEveryCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(soft::float_from_fp8_e4m3(static_cast<uint8_t>(c)))) << c;
      continue;
    }
    const float f = soft::float_from_fp8_e4m3(static_cast<uint8_t>(c));
    EXPECT_EQ(static_cast<double>(std::fabs(f)), e4m3_value(c & 0x7f)) << "code " << c;
    EXPECT_EQ(soft::fp8_e4m3_from_float(f), c) << "code " << c << " value " << f;
  }
}

TEST(NumberFormats, Fp8E4m3MatchesReference) {
  std::vector<float> in = dense_inputs(3);
  // Every half-way point between neighbouring codes (subnormals included) and the floats next to it.
  for (int c = 0; c < 0x7e; ++c) {
    const float mid = static_cast<float>((e4m3_value(c) + e4m3_value(c + 1)) / 2);  // exact in float
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      in.push_back(f);
      in.push_back(-f);
    }
  }
  int64_t bad = 0;
  for (float f : in) {
    const uint8_t got = soft::fp8_e4m3_from_float(f), want = e4m3_reference(f);
    if (got != want && bad++ < 10)
      ADD_FAILURE() << "float bits 0x" << std::hex << float_bits(f) << ": got 0x" << +got << ", reference 0x" << +want;
  }
  EXPECT_EQ(bad, 0) << "of " << in.size() << " inputs";
  // The edges by name: saturation, infinities, NaN, the smallest subnormal and half of it.
  EXPECT_EQ(soft::fp8_e4m3_from_float(448.0f), 0x7e);
  EXPECT_EQ(soft::fp8_e4m3_from_float(464.0f), 0x7e);  // tie between 448 and (absent) 480: even
  EXPECT_EQ(soft::fp8_e4m3_from_float(1e30f), 0x7e);
  EXPECT_EQ(soft::fp8_e4m3_from_float(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(soft::fp8_e4m3_from_float(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(soft::fp8_e4m3_from_float(std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(soft::fp8_e4m3_from_float(std::ldexp(1.0f, -10)), 0x00);  // tie with 0: even
  EXPECT_EQ(soft::fp8_e4m3_from_float(-0.0f), 0x80);
}

TEST(NumberFormats, Bf16MatchesReference) {
  const std::vector<float> in = dense_inputs(7);
  int64_t bad = 0;
  for (float f : in) {
    const uint16_t got = soft::bf16_from_float(f), want = bf16_reference(f);
    if (got != want && bad++ < 10)
      ADD_FAILURE() << "float bits 0x" << std::hex << float_bits(f) << ": got 0x" << got << ", reference 0x" << want;
  }
  EXPECT_EQ(bad, 0) << "of " << in.size() << " inputs";
  EXPECT_EQ(soft::bf16_from_float(1.0f), 0x3f80);
  // Ties go to the even neighbour (down, then up); the largest float rounds to infinity.
  EXPECT_EQ(soft::bf16_from_float(bits_float(0x3f808000u)), 0x3f80);
  EXPECT_EQ(soft::bf16_from_float(bits_float(0x3f818000u)), 0x3f82);
  EXPECT_EQ(soft::bf16_from_float(std::numeric_limits<float>::max()), 0x7f80);
}

TEST(NumberFormats, Ue8m0Scales) {
  for (int k = -30; k <= 30; ++k) {
    const float p = std::ldexp(1.0f, k);
    EXPECT_EQ(anyep::port::round_scale_ue8m0(p), p) << "2^" << k;
    EXPECT_EQ(anyep::port::round_scale_ue8m0(1.5f * p), 2.0f * p) << "1.5 * 2^" << k;
    EXPECT_EQ(anyep::port::ue8m0_exponent(p), static_cast<uint32_t>(k + 127)) << "2^" << k;
  }
}

}  // namespace
