// LogFMT-10 (kernels/ll/logfmt.h) on the CPU: which groups encode, the round-trip error bound, the
// bit layout of an encoded group, edge cases (zeros, constant, negative, inf/NaN, subnormal), the
// accuracy on DeepEP's test data, and the row layout formulas of ll/layout.h.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/ll/layout.h"
#include "kernels/ll/logfmt.h"

namespace anyep::ll {
namespace {

using logfmt::kEncodedBytes;
using logfmt::kGroup;

// float -> BF16 bits, round to nearest even (what torch's .to(torch.bfloat16) does); NaN kept NaN.
uint16_t bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float f32(uint16_t b) { return logfmt::bits_to_float(static_cast<uint32_t>(b) << 16); }

struct Coded {
  bool encoded;
  std::vector<float> out;  // decoded values (the BF16 values when not encoded)
  logfmt::Params p;
};

Coded round_trip(const std::vector<uint16_t>& x) {
  uint8_t enc[kEncodedBytes];
  uint32_t meta = 0;
  Coded c{logfmt::encode_group(x.data(), enc, &meta), std::vector<float>(kGroup), {}};
  if (c.encoded) {
    logfmt::decode_group(enc, meta, c.out.data());
    c.p = logfmt::params_of_meta(meta);
  } else {
    for (int i = 0; i < kGroup; ++i) c.out[i] = f32(x[i]);
  }
  return c;
}

std::vector<uint16_t> group_of(float (*fn)(int)) {
  std::vector<uint16_t> x(kGroup);
  for (int i = 0; i < kGroup; ++i) x[i] = bf16(fn(i));
  return x;
}

std::vector<uint16_t> gaussian_group(std::mt19937& rng, float scale) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<uint16_t> x(kGroup);
  for (auto& v : x) v = bf16(n(rng) * scale);
  return x;
}

// Every decoded value lies within the bound of the format: a factor of (1 + (2^step - 1) / 2) of
// the original (nearest level in the linear domain; 1e-3 of a level for the float arithmetic), or
// below amax * 2^-32 where log2(amin) was clipped.
void expect_within_bound(const std::vector<uint16_t>& x, const Coded& c) {
  ASSERT_TRUE(c.encoded);
  float amax = 0.0f;
  for (uint16_t b : x) amax = std::fmax(amax, std::fabs(f32(b)));
  const double rel = (std::exp2(static_cast<double>(c.p.step)) - 1.0) / 2.0 * 1.001;
  for (int i = 0; i < kGroup; ++i) {
    const double a = f32(x[i]), d = c.out[i];
    EXPECT_LE(std::fabs(d - a), std::fabs(a) * rel + amax * std::exp2(-32.0))
        << "value " << i << ": " << a << " decoded as " << d << " (step " << c.p.step << ")";
    if (a != 0.0 && d != 0.0) {
      EXPECT_EQ(std::signbit(a), std::signbit(d)) << "value " << i << " lost its sign";
    }
  }
}

TEST(LogFMT, GaussianGroupsRoundTripWithinTheBound) {
  std::mt19937 rng(7);
  for (float scale : {1e-6f, 1e-3f, 0.01f, 0.05f, 0.1f, 0.2f}) {
    for (int rep = 0; rep < 200; ++rep) {
      const auto x = gaussian_group(rng, scale);
      const Coded c = round_trip(x);
      ASSERT_TRUE(c.encoded) << "scale " << scale << ": amax < 1 must encode";
      expect_within_bound(x, c);
      EXPECT_LE(c.p.step, logfmt::kLogRange / logfmt::kSteps + 1e-6f);
    }
  }
}

TEST(LogFMT, EncodesOnlyWhenAmaxBelowOne) {
  // amax = 1 exactly: log2(amax) = 0 is not < 0, the group stays BF16 (and with it anything larger).
  EXPECT_FALSE(round_trip(group_of([](int i) { return i == 3 ? 1.0f : 0.001f * (i + 1); })).encoded);
  EXPECT_FALSE(round_trip(group_of([](int i) { return (i % 2 ? -3.0f : 2.0f) * (i + 1); })).encoded);
  // The largest BF16 below 1 (0.99609375) encodes.
  const auto x = group_of([](int i) { return i == 3 ? 0.99609375f : 0.001f * (i + 1); });
  const Coded c = round_trip(x);
  EXPECT_TRUE(c.encoded);
  expect_within_bound(x, c);
  EXPECT_NEAR(c.out[3], 0.99609375f, 0.99609375f * 0.01f);
}

TEST(LogFMT, AllZerosAndConstantGroupsStayBF16) {
  EXPECT_FALSE(round_trip(group_of([](int) { return 0.0f; })).encoded);
  EXPECT_FALSE(round_trip(group_of([](int) { return -0.0f; })).encoded);
  EXPECT_FALSE(round_trip(group_of([](int) { return 0.25f; })).encoded);
  // |x| constant with mixed signs: amin == amax, nothing to spread codes over.
  const Coded c = round_trip(group_of([](int i) { return i % 3 ? 0.25f : -0.25f; }));
  EXPECT_FALSE(c.encoded);
  EXPECT_EQ(c.out[0], -0.25f);
}

TEST(LogFMT, ZerosInAGroupDecodeToZeroAndClipTheRange) {
  const auto x = group_of([](int i) { return i % 4 == 0 ? 0.0f : 0.5f / static_cast<float>(i + 1); });
  const Coded c = round_trip(x);
  ASSERT_TRUE(c.encoded);
  for (int i = 0; i < kGroup; i += 4) EXPECT_EQ(c.out[i], 0.0f) << "value " << i;
  // amin = 0: log2(amin) is clipped to log2(amax) - 32, so the step is 32/510.
  EXPECT_NEAR(c.p.step, 32.0f / 510.0f, 1e-5f);
  expect_within_bound(x, c);
}

TEST(LogFMT, NegativeValuesKeepTheirSign) {
  std::mt19937 rng(11);
  const auto x = gaussian_group(rng, 0.1f);
  std::vector<uint16_t> neg(x);
  for (auto& v : neg) v ^= 0x8000u;
  const Coded a = round_trip(x), b = round_trip(neg);
  ASSERT_TRUE(a.encoded && b.encoded);
  for (int i = 0; i < kGroup; ++i) EXPECT_EQ(a.out[i], -b.out[i]) << "value " << i;
  expect_within_bound(neg, b);
}

// Policy: a group holding inf or NaN travels as BF16, so the value arrives unchanged (DeepEP's
// kernel would send a NaN of an otherwise encodable group as 0).
TEST(LogFMT, NonFiniteGroupsStayBF16) {
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    auto x = group_of([](int i) { return 0.01f * static_cast<float>(i % 7 + 1); });
    x[17] = bf16(bad);
    const Coded c = round_trip(x);
    EXPECT_FALSE(c.encoded) << bad;
    if (std::isnan(bad)) {
      EXPECT_TRUE(std::isnan(c.out[17]));
    } else {
      EXPECT_EQ(c.out[17], bad);
    }
    EXPECT_EQ(c.out[3], f32(x[3]));
  }
}

TEST(LogFMT, SubnormalAndTinyGroups) {
  // BF16 shares float's exponent range: values around 1e-38 and below (subnormal) still encode.
  const auto x = group_of([](int i) { return 1e-38f * static_cast<float>(i + 1); });
  const Coded c = round_trip(x);
  ASSERT_TRUE(c.encoded);
  expect_within_bound(x, c);
}

TEST(LogFMT, AmaxAndAminDecodeNearlyExactly) {
  std::mt19937 rng(3);
  for (int rep = 0; rep < 100; ++rep) {
    const auto x = gaussian_group(rng, 0.05f);
    const Coded c = round_trip(x);
    ASSERT_TRUE(c.encoded);
    int imax = 0, imin = 0;
    for (int i = 0; i < kGroup; ++i) {
      if (std::fabs(f32(x[i])) > std::fabs(f32(x[imax]))) imax = i;
      if (std::fabs(f32(x[i])) < std::fabs(f32(x[imin]))) imin = i;
    }
    // Code 511 is amax and code 1 amin (unless amin was clipped): only float rounding remains.
    EXPECT_NEAR(std::fabs(c.out[imax]), std::fabs(f32(x[imax])), std::fabs(f32(x[imax])) * 1e-4f);
    if (c.p.log_amin > std::log2(std::fabs(f32(x[imax]))) - 31.9f && f32(x[imin]) != 0.0f) {
      EXPECT_NEAR(std::fabs(c.out[imin]), std::fabs(f32(x[imin])), std::fabs(f32(x[imin])) * 1e-4f);
    }
  }
}

// The wire layout of one group: byte i = code bits 0..7 of value i; uint16 j at 128 + 2j = signs of
// values 8j..8j+7 (bits 0..7) and their code bit 8 (bits 8..15); meta = BF16 amax | BF16 amin << 16.
TEST(LogFMT, EncodedGroupBitLayout) {
  std::vector<uint16_t> x(kGroup);
  for (int i = 0; i < kGroup; ++i) x[i] = bf16(0.001f * static_cast<float>(i + 1));  // amin 0.001, amax 0.128
  x[0] = bf16(-0.5f);                                                                // amax, negative: code 511
  x[13] = bf16(-0.001f);                                                             // amin again, negative: code 1
  uint8_t enc[kEncodedBytes];
  uint32_t meta = 0;
  ASSERT_TRUE(logfmt::encode_group(x.data(), enc, &meta));
  EXPECT_EQ(meta & 0xffffu, bf16(0.5f));
  EXPECT_EQ(meta >> 16, bf16(0.001f));
  auto plane = [&](int j) { return static_cast<uint32_t>(enc[128 + 2 * j]) | (enc[128 + 2 * j + 1] << 8); };
  EXPECT_EQ(enc[0], 0xffu);              // 511 & 0xff
  EXPECT_EQ(plane(0) & 1u, 1u);          // value 0 negative
  EXPECT_EQ((plane(0) >> 8) & 1u, 1u);   // code bit 8 of value 0
  EXPECT_EQ(enc[13], 1u);                // code 1
  EXPECT_EQ((plane(1) >> 5) & 1u, 1u);   // value 13 = 8 + 5 negative
  EXPECT_EQ((plane(1) >> 13) & 1u, 0u);  // code 1 has no bit 8
  EXPECT_EQ((plane(2) & 0xffu), 0u);     // values 16..23 positive
  // Decoding the lane words of value 8j..8j+7 by hand gives the same as decode_group.
  float all[kGroup], lane[8];
  logfmt::decode_group(enc, meta, all);
  uint32_t low[2];
  std::memcpy(low, enc + 8 * 5, 8);
  logfmt::decode_lane(low[0], low[1], plane(5), logfmt::params_of_meta(meta), lane);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(lane[i], all[40 + i]);
}

// DeepEP's test (tests/test_low_latency.py at 567632d) checks the LogFMT combine of a BF16 dispatch
// with calc_diff(ref, out) < 1e-5, calc_diff(x, y) = 1 - 2 sum((x+1)(y+1)) / sum((x+1)^2 + (y+1)^2),
// on randn * 0.5 * random() tokens; every top-k slot of a token carries the same row there, so the
// output is (sum of weights) * decode(x), stored as BF16. The format meets the bound with a margin.
TEST(LogFMT, MeetsDeepEPAccuracyBoundOnItsTestData) {
  std::mt19937 rng(2025);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const int tokens = 32, hidden = 7168;
  for (int set = 0; set < 4; ++set) {
    const float scale = 0.5f * u(rng);
    double num = 0.0, den = 0.0;
    int encoded = 0;
    for (int t = 0; t < tokens; ++t) {
      const float wsum = 8.0f * u(rng) + 0.5f;
      for (int g0 = 0; g0 < hidden; g0 += kGroup) {
        std::vector<uint16_t> x(kGroup);
        for (auto& v : x) v = bf16(n(rng) * scale);
        const Coded c = round_trip(x);
        encoded += c.encoded;
        for (int i = 0; i < kGroup; ++i) {
          const double ref = static_cast<double>(f32(x[i])) * wsum + 1.0;
          const double out = static_cast<double>(f32(bf16(c.out[i] * wsum))) + 1.0;
          num += ref * out;
          den += ref * ref + out * out;
        }
      }
    }
    const double diff = 1.0 - 2.0 * num / den;
    EXPECT_LT(diff, 1e-5) << "scale " << scale << ", " << encoded << " groups encoded";
  }
}

// ---- the row layout (ll/layout.h) ----------------------------------------------------------------

TEST(LogFMTRow, OffsetsFollowTheMask) {
  std::mt19937 rng(5);
  for (int64_t H : {128, 1024, 7168, kMaxHidden}) {
    const Layout g{8, H, 2, 4};
    const int G = static_cast<int>(g.groups());
    for (int rep = 0; rep < 50; ++rep) {
      uint32_t mask[kLogfmtMaskWords] = {0, 0, 0, 0};
      std::vector<bool> enc(G);
      for (int i = 0; i < G; ++i) {
        enc[i] = rep == 0 ? false : rep == 1 ? true : (rng() & 1u);
        if (enc[i]) mask[i / kMaskWordBits] |= 1u << (i % kMaskWordBits);
      }
      for (int w = 0; w < kLogfmtMaskWords; ++w)
        EXPECT_EQ(mask[w] & ~logfmt_word_bits(w, G), 0u) << "word_bits must cover every group";
      int before = 0;
      uint64_t end = kHeaderBytes;  // groups follow the header back to back, 16-byte aligned
      for (int i = 0; i < G; ++i) {
        ASSERT_EQ(logfmt_before(mask, i), before) << "H " << H << " group " << i;
        const uint64_t off = Layout::logfmt_group_off(i, before);
        EXPECT_EQ(off, end);
        EXPECT_EQ(off % 16, 0u);
        end = off + (enc[i] ? logfmt::kEncodedBytes : logfmt::kRawBytes);
        before += enc[i];
      }
      const int n = logfmt_total(mask);
      ASSERT_EQ(n, before);
      EXPECT_EQ(g.logfmt_meta_off(n, 0), end) << "the meta words follow the last group";
      EXPECT_EQ(g.logfmt_meta_off(n, n), end + 4ull * n);
      EXPECT_LE(g.logfmt_row_bytes(n), g.combine_slot_bytes()) << "a row always fits its slot";
      EXPECT_LE(g.combine_slot_bytes(), g.msg_bytes()) << "a staged row fits a dispatch slot";
      EXPECT_EQ(g.logfmt_row_bytes(n) % 16, 0u);
      EXPECT_GE(g.logfmt_row_bytes(n), g.logfmt_meta_off(n, n));
      if (n == G) {
        // Everything encoded: 16 + G * (160 + 4) bytes (rounded up to 16), not 16 + 2H.
        EXPECT_EQ(g.logfmt_row_bytes(n), align_up(kHeaderBytes + static_cast<uint64_t>(G) * 164u, 16));
      }
    }
  }
}

TEST(LogFMTRow, WordBitsClipAtTheGroupCount) {
  EXPECT_EQ(logfmt_word_bits(0, 56), ~0u);
  EXPECT_EQ(logfmt_word_bits(1, 56), (1u << 24) - 1u);
  EXPECT_EQ(logfmt_word_bits(2, 56), 0u);
  EXPECT_EQ(logfmt_word_bits(3, 128), ~0u);
  EXPECT_EQ(logfmt_word_bits(0, 1), 1u);
  EXPECT_EQ(logfmt_word_bits(0, 32), ~0u);
  EXPECT_EQ(logfmt_word_bits(1, 32), 0u);
}

}  // namespace
}  // namespace anyep::ll
