// Kernels of the GPU channel test, callable from host C++ (the gtest side is plain C++).
#pragma once

#include <cstdint>

#include "channel/ring.h"
#include "common/gpu_runtime.h"

namespace anyep::gputest {

// Lane `p` (global thread id) is producer p. Its command j goes into ring ring_of(p, j, ...)
// and encodes, redundantly, who sent it and which one it is (see expected_cmd), so the consumer
// can check exactly-once, per-producer order, and that no slot was torn.
struct PushParams {
  const channel::RingHandle* rings;  // device array of producer handles (Channel::producer_array())
  uint32_t num_rings;
  uint32_t per_lane;        // commands each producing lane pushes
  uint32_t lanes_per_warp;  // lanes 0..lanes_per_warp-1 of each warp produce (<= kWarpSize)
  int warp_push;            // 1: RingHandle::push_warp, 0: RingHandle::push
  int spread_lanes;         // 1: lanes of a warp push into different rings at the same time
  uint32_t* progress;       // mapped host memory, one per lane: pushes completed (nullable)
  uint32_t* failures;       // device memory: pushes that returned kPushFailed
};

cudaError_t launch_push(const PushParams& p, uint32_t warps, uint32_t warps_per_block, cudaStream_t s);

ANYEP_HD inline uint32_t ring_of(uint32_t p, uint32_t j, uint32_t num_rings, int spread_lanes) {
  return (p / port::kWarpSize + j + (spread_lanes ? p % port::kWarpSize : 0)) % num_rings;
}

// The command producer p sends as its j-th: a WRITE whose fields all derive from (p, j, ring).
ANYEP_HD inline channel::TransferCmd expected_cmd(uint32_t p, uint32_t j, uint32_t ring) {
  channel::TransferCmd c{};
  // Cannot fail at the test's sizes: rank and length are masked into range, the offsets (16 * j,
  // 16 * p bytes) and the tag (a ring index) are far below their limits.
  (void)channel::try_make_write(&c, p & channel::cmd::kMaxDstRank, uint64_t{j} * channel::cmd::kOffsetAlign,
                                uint64_t{p} * channel::cmd::kOffsetAlign, j & channel::cmd::kMaxLength, ring,
                                (p ^ j) & 1);
  return c;
}

}  // namespace anyep::gputest
