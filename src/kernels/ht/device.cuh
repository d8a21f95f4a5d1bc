// anyep/src/kernels/ht/device.cuh — device helpers of the HT kernels: the rank barrier, bounded
// waits on ring totals, row copies (the helpers both modes use: kernels/common/device.cuh).
#pragma once

#include <cstdint>

#include "common/portability.h"
#include "kernels/common/device.cuh"
#include "kernels/ht/kernels.h"

namespace anyep::ht::dev {

using anyep::dev::bf16_to_float;
using anyep::dev::bf16x8_to_float;
using anyep::dev::float_to_bf16;
using anyep::dev::ld_recv;
using anyep::dev::push_cmd;
using anyep::dev::report;

template <typename T>
__device__ __forceinline__ T* at(uint8_t* base, uint64_t off) {
  return reinterpret_cast<T*>(base + off);
}
template <typename T>
__device__ __forceinline__ const T* at(const uint8_t* base, uint64_t off) {
  return reinterpret_cast<const T*>(base + off);
}

__device__ __forceinline__ RingMeta* meta_of(uint8_t* region, int c, int s) {
  return at<RingMeta>(region, kMetaOff + sizeof(RingMeta) * (uint64_t(c) * kMaxRanks + uint64_t(s)));
}
__device__ __forceinline__ uint64_t* head_of(uint8_t* region, int c, int d) {
  return at<uint64_t>(region, kHeadOff + 8ull * (uint64_t(c) * kMaxRanks + uint64_t(d)));
}
__device__ __forceinline__ uint64_t* mirror_of(uint8_t* region, int c, int s) {
  return at<uint64_t>(region, kMirrorOff + 8ull * (uint64_t(c) * kMaxRanks + uint64_t(s)));
}

// This call's barrier generation (written by the barrier that started the call, earlier on the
// stream: kernel boundaries make it visible).
__device__ __forceinline__ uint32_t current_epoch(const Ctx& x) { return *at<uint32_t>(x.local, 0); }

// Every rank's earlier HT kernels are done and what this block wrote before is visible to every
// rank after. Called by all threads of one block; false (error reported) on a timeout.
__device__ inline bool barrier_block(const Ctx& x) {
  __shared__ uint32_t s_epoch;
  __shared__ int s_fail;
  __syncthreads();  // the block's earlier writes happen-before thread r's release below
  if (threadIdx.x == 0) {
    uint32_t* ep = at<uint32_t>(x.local, 0);
    s_epoch = *ep + 1;
    *ep = s_epoch;
    s_fail = 0;
  }
  __syncthreads();
  const uint32_t e = s_epoch;
  if (static_cast<int>(threadIdx.x) < x.R) {
    const int r = static_cast<int>(threadIdx.x);
    // Release at system scope: peers that see the arrival see this rank's earlier writes.
    port::store_release_system(at<uint32_t>(x.peers[r], kBarrierOff + 4ull * x.rank), e);
    const uint32_t* mine = at<uint32_t>(x.local, kBarrierOff + 4ull * r);
    const uint64_t start = port::now_ns();
    // A peer may already be one barrier further (it passed this one): signed distance.
    while (static_cast<int32_t>(port::load_acquire_system(mine) - e) < 0) {
      if (port::now_ns() - start > x.timeout_ns) {
        report(x.err, kErrBarrierTimeout, x.rank, -1, r, static_cast<int>(e));
        s_fail = 1;
        break;
      }
    }
  }
  __syncthreads();
  return s_fail == 0;
}

// Spin until the 64-bit total at `p` (acquire, system scope) exceeds `need`; returns it, or 0 on
// timeout. Called by every lane of a warp: lane 0 spins, the warp agrees on its result, and each
// lane then acquires the word itself, so every lane's later reads see what the writer published.
__device__ __forceinline__ uint64_t warp_wait_total_above(const uint64_t* p, uint64_t need, uint64_t timeout_ns) {
  uint64_t v = 0;
  if (port::warp_lane() == 0) {
    const uint64_t start = port::now_ns();
    for (;;) {
      const uint64_t cur = port::load_acquire_system(p);
      if (cur > need) {
        v = cur;
        break;
      }
      if (port::now_ns() - start > timeout_ns) break;
    }
  }
  v = port::warp_broadcast(port::full_lane_mask(), v, 0);
  if (v != 0) port::load_acquire_system(p);
  return v;
}

// The same for a 32-bit tag that must equal `want`; false on timeout.
__device__ __forceinline__ bool warp_wait_tag(const uint32_t* p, uint32_t want, uint64_t timeout_ns) {
  uint64_t ok = 0;
  if (port::warp_lane() == 0) {
    const uint64_t start = port::now_ns();
    for (;;) {
      if (port::load_acquire_system(p) == want) {
        ok = 1;
        break;
      }
      if (port::now_ns() - start > timeout_ns) break;
    }
  }
  ok = port::warp_broadcast(port::full_lane_mask(), ok, 0);
  if (ok != 0) port::load_acquire_system(p);
  return ok != 0;
}

// Copy `bytes` (a multiple of 16) from `src` to `dst` with the lanes of a warp, eight 16-byte
// loads in flight per lane (a warp moves what it has in flight per memory latency). `src` is ring memory a peer wrote
// (L2 loads) or an input (read once).
template <bool kFromRing>
__device__ __forceinline__ void warp_copy(uint8_t* dst, const uint8_t* src, int64_t bytes, int lane) {
  constexpr int kStride = port::kWarpSize * 16;
  int64_t off = int64_t(lane) * 16;
  constexpr int kDepth = 8;
  for (; off + (kDepth - 1) * kStride < bytes; off += kDepth * kStride) {
    uint4 v[kDepth];
#pragma unroll
    for (int j = 0; j < kDepth; ++j)
      v[j] = kFromRing ? port::load_l2(reinterpret_cast<const uint4*>(src + off + j * kStride))
                       : port::load16_read_once(src + off + j * kStride);
#pragma unroll
    for (int j = 0; j < kDepth; ++j) *reinterpret_cast<uint4*>(dst + off + j * kStride) = v[j];
  }
  for (; off < bytes; off += kStride)
    *reinterpret_cast<uint4*>(dst + off) =
        kFromRing ? port::load_l2(reinterpret_cast<const uint4*>(src + off)) : port::load16_read_once(src + off);
}

}  // namespace anyep::ht::dev
