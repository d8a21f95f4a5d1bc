#include "push_kernels.h"

namespace anyep::gputest {

__global__ void push_kernel(PushParams p) {
  const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t lane = tid % port::kWarpSize;
  if (lane >= p.lanes_per_warp) return;
  for (uint32_t j = 0; j < p.per_lane; ++j) {
    const uint32_t ring = ring_of(tid, j, p.num_rings, p.spread_lanes);
    const channel::TransferCmd c = expected_cmd(tid, j, ring);
    const uint64_t idx = p.warp_push ? p.rings[ring].push_warp(c) : p.rings[ring].push(c);
    if (idx == channel::kPushFailed) atomicAdd(p.failures, 1u);
    if (p.progress) port::store_release_system(&p.progress[tid], j + 1);
  }
}

cudaError_t launch_push(const PushParams& p, uint32_t warps, uint32_t warps_per_block, cudaStream_t s) {
  const uint32_t blocks = (warps + warps_per_block - 1) / warps_per_block;
  push_kernel<<<blocks, warps_per_block * port::kWarpSize, 0, s>>>(p);
  return cudaGetLastError();
}

}  // namespace anyep::gputest
