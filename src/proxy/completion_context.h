// anyep/src/proxy/completion_context.h — what a proxy thread puts in WriteDesc::context (and
// post_imm's context) so that a local completion finds what to release: the ring whose outstanding
// count it decrements, the staging slot of a SIGNAL record (SignalLink), and the peer it went to
// (a failed completion names it; an elastic proxy drops that peer). One place for the bit layout,
// read by the thread's poll and by the signal link.
#pragma once

#include <cstdint>

namespace anyep::proxy::completion {

// bits [0, 16)  local ring (kNoRing: counted against no ring)
// bits [16, 48) staging slot + 1 (0: none)
// bits [48, 64) destination rank + 1 (0: not recorded)
inline constexpr int kRingBits = 16, kStagingBits = 32, kPeerBits = 16;
static_assert(kRingBits + kStagingBits + kPeerBits == 64, "the context is one 64-bit word");
inline constexpr uint64_t kNoRing = (1ull << kRingBits) - 1;
inline constexpr uint64_t kMaxPeer = (1ull << kPeerBits) - 2;  // larger ranks are not recorded

inline constexpr uint64_t make(uint64_t ring, uint64_t staging_plus_one = 0, uint64_t dst = ~0ull) {
  const uint64_t peer = dst <= kMaxPeer ? dst + 1 : 0;
  return ring | (staging_plus_one << kRingBits) | (peer << (kRingBits + kStagingBits));
}
inline constexpr uint64_t ring(uint64_t context) { return context & kNoRing; }
inline constexpr uint64_t staging_plus_one(uint64_t context) {
  return (context >> kRingBits) & ((1ull << kStagingBits) - 1);
}
// The destination rank, or -1 when none was recorded.
inline constexpr int64_t peer(uint64_t context) {
  return static_cast<int64_t>(context >> (kRingBits + kStagingBits)) - 1;
}

// Native atomics (ProxyConfig::native_atomics): no signal record is ever staged, so the staging
// field of a WRITE's or a native SIGNAL's context says instead what its completion releases on the
// sender: bit 31 of the field marks a native-mode post, bit 30 an atomic add (else a write), bit 29
// an ordered (kFenceOrdered) add; bits 0..13 the tag. Only a proxy in native mode makes or reads these.
inline constexpr uint64_t kNativeFlag = 1ull << 31, kNativeAdd = 1ull << 30, kNativeOrdered = 1ull << 29;
inline constexpr uint64_t kNativeTagMask = (1ull << 14) - 1;
inline constexpr uint64_t make_native(uint64_t ring, uint32_t tag, uint32_t dst, bool add, bool ordered) {
  return make(ring, kNativeFlag | (add ? kNativeAdd : 0) | (ordered ? kNativeOrdered : 0) | (tag & kNativeTagMask),
              dst);
}
inline constexpr bool native(uint64_t context) { return staging_plus_one(context) & kNativeFlag; }
inline constexpr bool native_add(uint64_t context) { return staging_plus_one(context) & kNativeAdd; }
inline constexpr bool native_ordered(uint64_t context) { return staging_plus_one(context) & kNativeOrdered; }
inline constexpr uint32_t native_tag(uint64_t context) {
  return static_cast<uint32_t>(staging_plus_one(context) & kNativeTagMask);
}

}  // namespace anyep::proxy::completion
