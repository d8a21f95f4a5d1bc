// anyep/src/kernels/common/proxy_path.h — what a kernel holds of the channel -> proxy path, and
// the numbering of the proxy's signal counters and fence groups that both modes use.
#pragma once

#include <cstdint>

#include "channel/ring.h"
#include "common/portability.h"

namespace anyep {

// The proxy's counters and fence groups are sized for this many experts (the LL signal area has
// one slot per counter: ll/layout.h).
inline constexpr int64_t kMaxExperts = 4096;
inline constexpr int64_t kNumResetCounters = 4 * kMaxExperts;  // LL dispatch counts, combine flags
inline constexpr int64_t kNumCounters = 5 * kMaxExperts;       // proxy signal counters (= signal slots)

ANYEP_HD ANYEP_INLINE constexpr int64_t max_local_experts(int64_t R) { return (kMaxExperts + R - 1) / R; }
// Fence groups (proxy tags): 2 kinds x 2 buffer halves x max_local_experts(R) (ll/layout.h).
ANYEP_HD ANYEP_INLINE constexpr int64_t num_proxy_tags(int64_t R) { return 4 * max_local_experts(R); }
// Counter a proxy SIGNAL targets for the signal at byte offset `signal_off` of the signal area.
ANYEP_HD ANYEP_INLINE constexpr uint32_t counter_of(uint64_t signal_off) {
  return static_cast<uint32_t>(signal_off / 4);
}

// The channel -> proxy path for peers without direct stores. Commands of one fence group (proxy
// tag) always go to one ring, rings[tag % num_rings]: the proxy thread owning it sees a group's
// WRITEs before its SIGNAL (the SIGNAL is pushed after every WRITE of the group was pushed), so
// the order holds even when the proxy bypasses its ordering engine.
struct ProxyPath {
  const channel::RingHandle* rings = nullptr;  // device array [num_rings]; null: no proxy
  int num_rings = 0;
  unsigned long long* counters = nullptr;  // [kNumCounters] pinned host memory, GPU view
};

}  // namespace anyep
