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

}  // namespace anyep::proxy::completion
