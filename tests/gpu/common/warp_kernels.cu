#include "common/portability.h"
#include "warp_kernels.h"

namespace anyep::gputest {

__global__ void warp_probe_kernel(WarpSeen* out) {
  const int t = static_cast<int>(threadIdx.x);
  const int w = t / port::kWarpSize;
  const int lane = port::warp_lane();
  const int last = port::kWarpSize - 1;
  out->lane[t] = lane;
  out->shuffle_xor[t] = port::warp_shuffle_xor(lane, 1);
  out->shuffle_last[t] = port::warp_shuffle(3 * lane, last);
  out->reduce_sum[t] = port::warp_reduce_sum(lane);
  const uint64_t ballot = port::warp_ballot((lane & 1) != 0);
  const uint64_t full = port::full_lane_mask();
  const bool any_last = port::warp_any(lane == last);
  const bool all_below = port::warp_all(lane < port::kWarpSize);
  const bool all_but_last = port::warp_all(lane != last);
  if (lane == 0) {
    out->ballot_odd[w] = ballot;
    out->full_mask[w] = full;
    out->any_last[w] = any_last;
    out->all_below[w] = all_below;
    out->all_but_last[w] = all_but_last;
    out->scratch[w] = 1000 + w;
  }
  port::warp_sync();
  out->synced[t] = *static_cast<volatile int32_t*>(&out->scratch[w]);
  if (lane < 5) out->active_low[t] = port::warp_active_mask();

  const uint64_t ballot_masked = port::warp_ballot(full, (lane & 1) != 0);
  if (lane == 0) out->ballot_odd_masked[w] = ballot_masked;
  out->below[t] = port::popcount64(port::lanes_below());
  out->reduce_min[t] = port::warp_reduce_min(100.0f - static_cast<float>(lane));
  out->reduce_min4[t] = port::warp_reduce_min<4>(100.0f - static_cast<float>(lane));
  port::warp_sync(full);  // every lane has read scratch before lane 0 rewrites it
  if (lane == 0) out->scratch[w] = 2000 + w;
  port::warp_sync(full);
  out->synced_masked[t] = *static_cast<volatile int32_t*>(&out->scratch[w]);
}

cudaError_t launch_warp_probe(WarpSeen* out, cudaStream_t s) {
  warp_probe_kernel<<<1, kLanes, 0, s>>>(out);
  return cudaGetLastError();
}

}  // namespace anyep::gputest
