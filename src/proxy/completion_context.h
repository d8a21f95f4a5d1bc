// anyep/src/proxy/completion_context.h — what a proxy thread puts in WriteDesc::context (and
// post_imm's context) so that a local completion finds what to release: the ring whose outstanding
// count it decrements, and the staging slot of a SIGNAL record (SignalLink). One place for the
// bit layout, read by the thread's poll and by the signal link.
#pragma once

#include <cstdint>

namespace anyep::proxy::completion {

// bits 0..15 local ring (kNoRing: counted against no ring), bits 16..47 staging slot + 1 (0: none).
inline constexpr uint64_t kNoRing = 0xffff;
inline constexpr uint64_t make(uint64_t ring, uint64_t staging_plus_one = 0) { return ring | (staging_plus_one << 16); }
inline constexpr uint64_t ring(uint64_t context) { return context & 0xffff; }
inline constexpr uint64_t staging_plus_one(uint64_t context) { return context >> 16; }

}  // namespace anyep::proxy::completion
