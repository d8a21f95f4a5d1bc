// anyep/src/proxy/imm_format.h
//
// What proxies say to each other: the 32-bit immediate delivered with a write (or alone), and the
// 32-byte signal record a SIGNAL travels as. One header for the sending and the receiving proxy,
// the ordering engine and the tests; docs/proxy.md explains the protocol.
//
// The source rank is NOT in the immediate: the transport reports it with every arrival
// (ImmEvent::src_rank), so the rank count is bounded only by the transport (>= 65535 here).
//
// Immediate layout (bits 30..31 = kind):
//
//   kWrite   bits  0..13  tag        14 bits  fence group (LL: local expert, HT: channel), < 16384
//            bits 14..21  segment     8 bits  HT partial order: ordered signals the sender had
//                                             sent on (dst, tag) before this write, mod 256
//            bit  22      plus_one    1 bit   WRITE+kWriteSignal: counter[tag] += 1 once landed
//            bits 23..29  reserved    7 bits  must be zero
//   kSignal  bits  0..29  seq        30 bits  per (sender thread -> receiver) signal number,
//                                             mod 2^30; record slot = seq % slots_per_peer
//   kBarrier bits  0..15  epoch      16 bits  barrier generation, mod 65536
//            bit  16      rail        1 bit   same-rail subset barrier
//            bits 17..29  reserved   13 bits  must be zero
//   kCredit  bits  0..29  slots      30 bits  signal-record slots the receiver has freed
//
// A SIGNAL (24-bit counter, 32-bit value, 16-bit tag, fence mode, 32-bit fence count) does not
// fit in 32 bits, so it travels as a SignalRecord written into the receiver's per-peer signal
// area, followed (same write) by a kSignal immediate naming the record's sequence number. The
// transport delivers the immediate only after the record is in place, so the receiver can read
// the record when it sees the immediate. Slots are flow controlled by kCredit messages.
#pragma once

#include <cstdint>

namespace anyep::proxy::imm {

enum class Kind : uint32_t { kWrite = 0, kSignal = 1, kBarrier = 2, kCredit = 3 };

inline constexpr int kKindBits = 2;
inline constexpr int kKindShift = 30;
inline constexpr int kPayloadBits = 30;

inline constexpr int kTagBits = 14;
inline constexpr int kTagShift = 0;
inline constexpr int kSegmentBits = 8;
inline constexpr int kSegmentShift = kTagShift + kTagBits;
inline constexpr int kPlusOneShift = kSegmentShift + kSegmentBits;
inline constexpr int kWriteUsedBits = kPlusOneShift + 1;

inline constexpr int kSeqBits = 30;
inline constexpr int kEpochBits = 16;
inline constexpr int kRailShift = kEpochBits;
inline constexpr int kCreditBits = 30;

static_assert(kKindShift + kKindBits == 32, "kind sits in the top bits of a 32-bit immediate");
static_assert(kWriteUsedBits <= kPayloadBits, "kWrite payload fits below the kind");
static_assert(kRailShift + 1 <= kPayloadBits, "kBarrier payload fits below the kind");
static_assert(kSeqBits <= kPayloadBits && kCreditBits <= kPayloadBits, "payloads fit");

inline constexpr uint32_t mask(int bits) { return bits >= 32 ? ~0u : ((1u << bits) - 1); }

inline constexpr uint32_t kMaxTags = 1u << kTagBits;          // 16384 fence groups
inline constexpr uint32_t kNumSegments = 1u << kSegmentBits;  // segment ids wrap mod 256
inline constexpr uint32_t kSeqMask = mask(kSeqBits);
inline constexpr uint32_t kEpochMask = mask(kEpochBits);
static_assert(kMaxTags >= 1024, "tags must name >= 1024 local experts");

inline constexpr Kind kind(uint32_t v) { return static_cast<Kind>(v >> kKindShift); }

inline constexpr uint32_t encode_write(uint32_t tag, uint32_t segment, bool plus_one) {
  return (static_cast<uint32_t>(Kind::kWrite) << kKindShift) | ((tag & mask(kTagBits)) << kTagShift) |
         ((segment & mask(kSegmentBits)) << kSegmentShift) | (plus_one ? 1u << kPlusOneShift : 0u);
}
inline constexpr uint32_t write_tag(uint32_t v) { return (v >> kTagShift) & mask(kTagBits); }
inline constexpr uint32_t write_segment(uint32_t v) { return (v >> kSegmentShift) & mask(kSegmentBits); }
inline constexpr bool write_plus_one(uint32_t v) { return (v >> kPlusOneShift) & 1u; }
inline constexpr bool write_reserved_clear(uint32_t v) { return ((v & mask(kPayloadBits)) >> kWriteUsedBits) == 0; }

inline constexpr uint32_t encode_signal(uint32_t seq) {
  return (static_cast<uint32_t>(Kind::kSignal) << kKindShift) | (seq & kSeqMask);
}
inline constexpr uint32_t signal_seq(uint32_t v) { return v & kSeqMask; }

inline constexpr uint32_t encode_barrier(uint32_t epoch, bool rail) {
  return (static_cast<uint32_t>(Kind::kBarrier) << kKindShift) | (epoch & kEpochMask) | (rail ? 1u << kRailShift : 0u);
}
inline constexpr uint32_t barrier_epoch(uint32_t v) { return v & kEpochMask; }
inline constexpr bool barrier_rail(uint32_t v) { return (v >> kRailShift) & 1u; }
inline constexpr bool barrier_reserved_clear(uint32_t v) { return ((v & mask(kPayloadBits)) >> (kRailShift + 1)) == 0; }

inline constexpr uint32_t encode_credit(uint32_t slots) {
  return (static_cast<uint32_t>(Kind::kCredit) << kKindShift) | (slots & mask(kCreditBits));
}
inline constexpr uint32_t credit_slots(uint32_t v) { return v & mask(kCreditBits); }

}  // namespace anyep::proxy::imm

namespace anyep::proxy {

// How a signal waits at the receiver (TransferCmd SIGNAL flags kFenceCount / kFenceOrdered).
enum class Fence : uint8_t {
  kNone = 0,     // applied on arrival
  kCount = 1,    // LL: after fence_count more writes of (src, tag) have landed (cumulative)
  kOrdered = 2,  // HT: after every earlier write and ordered signal of (src, tag) was applied
};

// One SIGNAL on the wire: written into slot (seq % slots_per_peer) of the receiver's signal area
// for this sender, then announced by a kSignal immediate carrying `seq`.
struct alignas(16) SignalRecord {
  uint32_t seq;          // 30 bits used; must equal the immediate's seq (detects a lapped slot)
  uint32_t counter;      // 24 bits used: index into the receiver's counter array
  int32_t value;         // added to the counter (two's complement into 64 bits)
  uint16_t tag;          // fence group, < imm::kMaxTags
  uint8_t fence;         // Fence
  uint8_t segment;       // kOrdered: the segment this signal closes (mod 256)
  uint32_t fence_count;  // kCount: writes it vouches for; kOrdered: writes in its segment
  uint32_t reserved[3];  // zero; pads the record to 32 bytes (two 16-byte units)
};
static_assert(sizeof(SignalRecord) == 32, "SignalRecord is 32 bytes on the wire");

}  // namespace anyep::proxy
