// anyep/src/kernels/ll/logfmt.h — LogFMT-10, the compressed combine payload (low_latency_combine with
// use_logfmt=True): the encode/decode math of one group, shared by the combine kernel and the CPU
// tests. Where a group sits in a combine row is the layout's business (ll/layout.h).
//
// Semantics (DeepEP's, commit 567632d, csrc/kernels/internode_ll.cu): per group of 128 BF16 values,
// with a = |x|, amax and amin over the group,
//   log_amax = log2(amax), log_amin = max(log2(amin), log_amax - 32)   (an amin of 0 clips too)
//   the group is encoded iff log_amax < 0 (amax < 1) and log_amin < log_amax; else it stays BF16
//   (so all-zero and constant groups stay BF16, and so does any group with amax >= 1);
//   step = (log_amax - log_amin) / 510;
//   code(a) = floor(max(log2(a) / step + 2 - log2((1 + 2^step) / 2) / step - log_amin / step, 0)),
//     at most 511: code 0 decodes to 0, code c >= 1 to 2^(log_amin + (c - 1) * step), and the
//     threshold between two codes is the arithmetic mean of their values (round to nearest in the
//     linear domain); plus a sign bit: 10 bits per value.
// The group's amax and amin travel with it as two BF16 values (both are BF16 values of the group,
// so exact), from which the receiver recomputes log_amin and step.
// Error: a decoded value is within a factor 2^(step/2) (and the approximation error of log2/exp2)
// of the original, step <= 32/510; values below amax * 2^-32 may decode to 0.
//
// Non-finite values (anyep's policy; DeepEP's kernel would send a NaN of an encodable group as
// 0): a group holding an inf or NaN stays BF16, so the value arrives unchanged.
//
// Encoded group (kEncodedBytes = 160, 16-byte aligned, written by 16 lanes of 8 values each):
//   bytes [0, 128)    byte i: bits 0..7 of value i's code
//   bytes [128, 160)  uint16 j, for values 8j..8j+7: bits 0..7 their signs, bits 8..15 bit 8 of
//                     their codes
// Meta word (kMetaBytes = 4): bits 0..15 the BF16 bits of amax, bits 16..31 those of amin.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/portability.h"

namespace anyep::ll::logfmt {

inline constexpr int kGroup = 128;                             // values per group (one amax/amin pair)
inline constexpr int kCodeBits = 9;                            // magnitude code; with the sign 10 bits a value
inline constexpr uint32_t kMaxCode = (1u << kCodeBits) - 1;    // 511
inline constexpr int kSteps = (1 << kCodeBits) - 2;            // 510 steps from code 1 (amin) to 511 (amax)
inline constexpr float kLogRange = 32.0f;                      // log2(amin) is clipped to log2(amax) - 32
inline constexpr float kLogThreshold = 0.0f;                   // only groups with log2(amax) < 0 are encoded
inline constexpr int kLaneValues = 8;                          // values per lane: one 16-byte BF16 vector
inline constexpr int kLanesPerGroup = kGroup / kLaneValues;    // 16
inline constexpr int kLowBytes = kGroup;                       // one code byte per value
inline constexpr int kPlaneBytes = 2 * kLanesPerGroup;         // one uint16 (signs, code bit 8) per lane
inline constexpr int kEncodedBytes = kLowBytes + kPlaneBytes;  // 160
inline constexpr int kRawBytes = 2 * kGroup;                   // 256: a group left in BF16
inline constexpr int kMetaBytes = 4;                           // BF16 amax, BF16 amin

static_assert(kEncodedBytes * 8 == kGroup * (kCodeBits + 1), "10 bits per value, nothing else");
static_assert(kLaneValues * 2 == 16, "a lane holds one 16-byte BF16 vector");
static_assert(kEncodedBytes % 16 == 0 && kRawBytes % 16 == 0, "groups stay 16-byte aligned in a row");
static_assert(kMetaBytes < kRawBytes - kEncodedBytes, "an encoded group and its meta are smaller than BF16");
static_assert(port::kWarpSize % kLanesPerGroup == 0, "a group's lanes sit in one warp");

ANYEP_HD ANYEP_INLINE float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}
ANYEP_HD ANYEP_INLINE uint32_t float_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

// |x| of a BF16 bit pattern; an inf or NaN counts as +inf (its group then stays BF16).
ANYEP_HD ANYEP_INLINE float abs_or_inf(uint32_t bf16_bits) {
  const uint32_t a = bf16_bits & 0x7fffu;
  return a >= 0x7f80u ? INFINITY : bits_to_float(a << 16);
}

// What encodes / decodes one group; a function of (amax, amin) only, so sender and receiver
// (which recomputes it from the meta word) get the same values.
struct Params {
  bool encode = false;  // the group travels as LogFMT (else BF16)
  float log_amin = 0;   // log2 of the value of code 1
  float step = 0;       // log2 distance of neighbouring codes
  float inv_step = 0;
  float bias = 0;  // code = floor(log2(a) * inv_step + bias)
};

ANYEP_HD ANYEP_INLINE Params params(float amax, float amin) {
  Params p;
  const float log_amax = port::log2_approx(amax);
  p.log_amin = fmaxf(port::log2_approx(amin), log_amax - kLogRange);
  p.encode = log_amax < kLogThreshold && p.log_amin < log_amax;  // false for inf and all-zero groups
  if (!p.encode) return p;
  p.step = (log_amax - p.log_amin) / static_cast<float>(kSteps);
  p.inv_step = 1.0f / p.step;
  // +2: code 1 is log_amin; minus the log2 of the mean of two neighbouring levels (in steps):
  // floor then rounds to the nearest level in the linear domain.
  p.bias = 2.0f - port::log2_approx((1.0f + port::exp2_approx(p.step)) * 0.5f) * p.inv_step - p.log_amin * p.inv_step;
  return p;
}

ANYEP_HD ANYEP_INLINE uint32_t pack_meta(float amax, float amin) {
  return (float_to_bits(amax) >> 16) | (float_to_bits(amin) & 0xffff0000u);
}
ANYEP_HD ANYEP_INLINE Params params_of_meta(uint32_t meta) {
  return params(bits_to_float(meta << 16), bits_to_float(meta & 0xffff0000u));
}

ANYEP_HD ANYEP_INLINE uint32_t encode_value(float a, const Params& p) {
  // log2(0) = -inf: code 0. Clamped to kMaxCode against the approximations at amax.
  const float v = fminf(fmaxf(port::log2_approx(a) * p.inv_step + p.bias, 0.0f), static_cast<float>(kMaxCode));
  return static_cast<uint32_t>(v);
}

ANYEP_HD ANYEP_INLINE float decode_value(uint32_t code, const Params& p) {
  return code == 0 ? 0.0f : port::exp2_approx(static_cast<float>(code - 1) * p.step + p.log_amin);
}

// One lane's 8 values: 4 words of two BF16 each (value 2i in the low half of word i).
struct Range {
  float amax, amin;
};
ANYEP_HD ANYEP_INLINE Range lane_range(const uint32_t w[4]) {
  Range r{0.0f, INFINITY};
  for (int i = 0; i < 4; ++i) {
    const float a = abs_or_inf(w[i] & 0xffffu), b = abs_or_inf(w[i] >> 16);
    r.amax = fmaxf(r.amax, fmaxf(a, b));
    r.amin = fminf(r.amin, fminf(a, b));
  }
  return r;
}

// A lane's part of an encoded group: its 8 code bytes (low[0]: values 0..3) and its plane word.
struct LaneCode {
  uint32_t low[2];
  uint32_t plane;  // bits 0..7 signs, bits 8..15 code bit 8 (a uint16 on the wire)
};
ANYEP_HD ANYEP_INLINE LaneCode encode_lane(const uint32_t w[4], const Params& p) {
  LaneCode c{{0u, 0u}, 0u};
  for (int i = 0; i < kLaneValues; ++i) {
    const uint32_t bits = (w[i / 2] >> (16 * (i % 2))) & 0xffffu;
    const uint32_t code = encode_value(abs_or_inf(bits), p);
    c.low[i / 4] |= (code & 0xffu) << (8 * (i % 4));
    c.plane |= ((bits >> 15) << i) | ((code >> 8) << (8 + i));
  }
  return c;
}

ANYEP_HD ANYEP_INLINE void decode_lane(uint32_t low0, uint32_t low1, uint32_t plane, const Params& p,
                                       float out[kLaneValues]) {
  for (int i = 0; i < kLaneValues; ++i) {
    const uint32_t low = i < 4 ? low0 : low1;
    const uint32_t code = ((low >> (8 * (i % 4))) & 0xffu) | (((plane >> (8 + i)) & 1u) << 8);
    const float v = decode_value(code, p);
    out[i] = (plane >> i) & 1u ? -v : v;
  }
}

// A whole group at once (CPU tests; the kernel runs the lane functions on 16 lanes). Returns
// whether it encodes; if so, fills `out` (kEncodedBytes) and `*meta`.
ANYEP_HD inline bool encode_group(const uint16_t x[kGroup], uint8_t out[kEncodedBytes], uint32_t* meta) {
  uint32_t w[kLanesPerGroup][4];
  Range r{0.0f, INFINITY};
  for (int q = 0; q < kLanesPerGroup; ++q) {
    for (int i = 0; i < 4; ++i) w[q][i] = x[8 * q + 2 * i] | (static_cast<uint32_t>(x[8 * q + 2 * i + 1]) << 16);
    const Range lr = lane_range(w[q]);
    r.amax = fmaxf(r.amax, lr.amax);
    r.amin = fminf(r.amin, lr.amin);
  }
  const Params p = params(r.amax, r.amin);
  if (!p.encode) return false;
  for (int q = 0; q < kLanesPerGroup; ++q) {
    const LaneCode c = encode_lane(w[q], p);
    memcpy(out + 8 * q, c.low, 8);
    const uint16_t plane = static_cast<uint16_t>(c.plane);
    memcpy(out + kLowBytes + 2 * q, &plane, 2);
  }
  *meta = pack_meta(r.amax, r.amin);
  return true;
}

ANYEP_HD inline void decode_group(const uint8_t in[kEncodedBytes], uint32_t meta, float out[kGroup]) {
  const Params p = params_of_meta(meta);
  for (int q = 0; q < kLanesPerGroup; ++q) {
    uint32_t low[2];
    uint16_t plane;
    memcpy(low, in + 8 * q, 8);
    memcpy(&plane, in + kLowBytes + 2 * q, 2);
    decode_lane(low[0], low[1], plane, p, out + 8 * q);
  }
}

}  // namespace anyep::ll::logfmt
