// Kernels of test_warp_gpu (host side: plain C++).
#pragma once

#include <cstdint>

#include "common/gpu_runtime.h"
#include "common/portability.h"

namespace anyep::gputest {

// What every lane of a one-block launch of kWarps warps saw (device memory, zeroed before).
inline constexpr int kWarps = 2;
inline constexpr int kLanes = kWarps * port::kWarpSize;
struct WarpSeen {
  int32_t lane[kLanes];          // port::warp_lane() of each thread
  int32_t shuffle_xor[kLanes];   // warp_shuffle_xor(lane, 1)
  int32_t shuffle_last[kLanes];  // warp_shuffle(3 * lane, last lane)
  int32_t reduce_sum[kLanes];    // warp_reduce_sum(lane)
  int32_t synced[kLanes];        // what lane 0 stored before warp_sync()
  uint64_t ballot_odd[kWarps];   // warp_ballot(lane is odd), from lane 0
  uint64_t full_mask[kWarps];    // full_lane_mask(), from lane 0
  int32_t any_last[kWarps];      // warp_any(lane is the last)
  int32_t all_below[kWarps];     // warp_all(lane < kWarpSize): 1
  int32_t all_but_last[kWarps];  // warp_all(lane is not the last): 0
  uint64_t active_low[kLanes];   // warp_active_mask() inside `if (lane < 5)` (0 elsewhere)
  int32_t scratch[kWarps];       // lane 0's store that the other lanes read after warp_sync()
  // The HT kernels' forms: ballot and warp_sync with an explicit lane mask (full_lane_mask()).
  uint64_t ballot_odd_masked[kWarps];  // warp_ballot(full, lane is odd), from lane 0
  int32_t below[kLanes];               // popcount64(lanes_below()): the lane's index
  float reduce_min[kLanes];            // warp_reduce_min(100 - lane) over the warp
  float reduce_min4[kLanes];           // warp_reduce_min<4>(100 - lane): per group of 4 lanes
  int32_t synced_masked[kLanes];       // what lane 0 stored (again) before warp_sync(full)
};

cudaError_t launch_warp_probe(WarpSeen* out, cudaStream_t s);

}  // namespace anyep::gputest
