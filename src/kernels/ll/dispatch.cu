// anyep/src/kernels/ll/dispatch.cu — low-latency dispatch (send and receive phases).
//
// Send: one block per token (grid-strided). Thread k < K takes the message slot (this rank, token,
// k' = its entries before k on the same owner) in e's owner's region for this rank, claims row s
// of (e's local index l, this rank), writes the 16-byte header and enters the slot in the route
// list of (l, this rank) at s (ll/layout.h); then the block
// streams the payload (BF16 copied, or FP8 cast once per token with one scale per 128 elements)
// with 16-byte stores to every destination, and counts the token as sent per expert. One warp
// per expert then waits until all of that expert's tokens are counted (its total from the
// block's shared histogram of the top-k table) and stores the count to the owner (release:
// system scope, device scope for the own rank): the count is ordered after the data it covers.
// Receive (ll/dispatch_recv.cuh): one team of a block per (local expert, source rank) region waits
// for its count and copies the region's rows into recv_x. The fused kernel runs it after the send;
// the staged hook's receive launches a kernel of its own (ll/dispatch_recv.cu).
//
// NVLink peers get direct stores through CUDA IPC pointers (c.peers[r]); a null entry marks a
// peer behind the proxy: the message is built in this rank's staging slot (b, t, k), a WRITE
// (tag = the destination's fence group for (half, local expert)) copies it to its message slot on
// the owner, the route list staged here goes as one more WRITE, and the count as a SIGNAL with
// kFenceCount = the number of WRITEs it covers, so the receiving proxy applies it only after they
// all landed.
// Shrink mode (c.mask set): a masked owner gets neither tokens nor a count, a masked source
// counts as 0 tokens, and a source whose count times out is masked instead of failing the call.
#include "kernels/common/kernel_loading.cuh"
#include "kernels/ll/device.cuh"
#include "kernels/ll/dispatch_recv.cuh"
#include "kernels/ll/kernels.h"

namespace anyep::ll {
namespace {

constexpr int kMaxGroups = kMaxHidden / kScaleGroup;
constexpr float kFp8Max = 448.0f;
// The send's expert counts: each thread loads up to kCountPer top-k entries where the kernel starts
// (in the shadow of the slot claims) and adds the ones of this block's experts to a shared
// histogram of up to kCountSlots experts. A warp per expert scanning the whole top-k table from
// global memory after the tokens took 2.5 us (timeline, 1 rank, H200: 1024 entries, 4 dependent
// rounds of loads). Larger tables, or more experts per block, scan as before.
constexpr int kCountPer = 4;
constexpr int kCountSlots = 64;

// Cast 16 BF16 values (two 16-byte vectors) to FP8 e4m3 with multiplier `inv`.
__device__ __forceinline__ uint4 cast16_fp8(const float* f, float inv) {
  uint32_t w[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint16_t lo = port::float2_to_fp8x2_e4m3(f[4 * q] * inv, f[4 * q + 1] * inv);
    const uint16_t hi = port::float2_to_fp8x2_e4m3(f[4 * q + 2] * inv, f[4 * q + 3] * inv);
    w[q] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Add this thread's top-k entries of the block's experts (e % grid == block) to the shared
// histogram (slot e / grid).
__device__ __forceinline__ void count_mine(const int (&mine)[kCountPer], int E, int* s_count) {
  const int grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
#pragma unroll
  for (int u = 0; u < kCountPer; ++u)
    if (mine[u] >= 0 && mine[u] < E && mine[u] % grid == b) atomicAdd(&s_count[mine[u] / grid], 1);
}

template <bool kCompact>
__device__ void send_phase(const DispatchArgs& a) {
  const Common& c = a.c;
  const Layout& g = c.g;
  const int L = static_cast<int>(g.L()), T = static_cast<int>(g.T), H = static_cast<int>(g.H);
  const int K = c.num_topk, E = static_cast<int>(g.E);
  __shared__ uint8_t* s_dst[kMaxTopk];
  __shared__ int s_proxy_slot[kMaxTopk];  // >= 0: slot (fast) / message (compact) on the owner, by a proxy WRITE
  const int C = static_cast<int>(g.slots_per_token());
  __shared__ float s_scale[kMaxGroups];
  const uint64_t used = g.msg_used_bytes(a.fmt == Format::kBF16);
  const uint8_t* x = static_cast<const uint8_t*>(a.x);

  // Expert e is counted by block e % grid, warp e / grid (below); its histogram slot is e / grid.
  const int nk = c.num_tokens * K, grid = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  const bool shared_count =
      nk <= kCountPer * static_cast<int>(blockDim.x) && (E + grid - 1) / grid <= kCountSlots;  // uniform
  __shared__ int s_count[kCountSlots];
  int mine[kCountPer];
#pragma unroll
  for (int u = 0; u < kCountPer; ++u) {
    const int i = static_cast<int>(threadIdx.x + u * blockDim.x);
    mine[u] = shared_count && i < nk ? static_cast<int>(a.topk_idx[i]) : -1;
  }
  if (threadIdx.x < static_cast<unsigned>(kCountSlots)) s_count[threadIdx.x] = 0;
  // After a barrier that follows the zeroing: the first token's, or the one after the loop.
  bool counted = !shared_count;

  for (int t = blockIdx.x; t < c.num_tokens; t += gridDim.x) {
    if (threadIdx.x < static_cast<unsigned>(K)) {
      const int k = threadIdx.x;
      const int e = static_cast<int>(a.topk_idx[static_cast<int64_t>(t) * K + k]);
      uint8_t* dst = nullptr;
      int proxy_slot = -1;
      // Compact: k' of msg_slot_in_token (ll/layout.h), the valid entries before k with the same
      // owner; with a match instruction from one match over the K lanes (-1: no owner, never a
      // valid one's) instead of k loads of the top-k row.
      int kp = 0;
      if constexpr (kCompact) {
        if constexpr (port::kExactMatchAny) {
          const int owner_of_k = e >= 0 && e < E ? e / L : -1;
          kp = port::popcount64(port::warp_match_any((1ull << K) - 1, static_cast<uint64_t>(owner_of_k)) &
                                ((1ull << k) - 1));
        } else {
          kp = msg_slot_in_token(a.topk_idx + static_cast<int64_t>(t) * K, k, L, E);
        }
      }
      if (e >= E) dev::report(c.err, kErrBadExpert, c.rank, e, -1, t);
      // A masked owner (shrink mode) gets nothing; the token is still counted as sent below.
      if (e >= 0 && e < E && !dev::rank_masked(c, e / L)) {
        const int owner = e / L;
        const int m = t * C + kp;  // compact: message slot in the owner's region for this rank
        const int slot = atomicAdd(&c.ws.send_slot[e], 1);
        uint8_t* base = c.peers[owner];
        if (slot >= T || (kCompact && kp >= C)) {
          dev::report(c.err, kErrSlotOverflow, c.rank, e, owner, slot);
        } else if (base != nullptr) {
          if constexpr (kCompact) {
            // Layout: message (buf, this rank, m), and row `slot` of (l = e % L, this rank) names it.
            dst = base + g.dispatch_msg_off(c.buf, c.rank, m);
            *reinterpret_cast<int32_t*>(base + g.route_off(c.buf, e % L, c.rank, slot)) = m;
          } else {
            // Layout: dispatch slot (buf, l = e % L, r = this rank, slot) — ll/layout.h.
            dst = base + g.dispatch_slot_off(c.buf, e % L, c.rank, slot);
          }
        } else if (c.proxy.rings != nullptr) {
          dst = c.local + g.stage_slot_off(c.buf, t, k);  // staged here, sent by the proxy
          if constexpr (kCompact) *reinterpret_cast<int32_t*>(c.local + g.route_stage_off(c.buf, e, slot)) = m;
          proxy_slot = kCompact ? m : slot;
        } else {
          dev::report(c.err, kErrNoPeer, c.rank, e, owner, 0);
        }
        if (dst) dev::st16(dst, make_uint4(static_cast<uint32_t>(t), static_cast<uint32_t>(k), 0u, 0u));
      }
      s_dst[k] = dst;
      s_proxy_slot[k] = proxy_slot;
    }
    __syncthreads();
    if (!counted) {  // the top-k registers are free before the payload needs its own
      count_mine(mine, E, s_count);
      counted = true;
    }
    if (threadIdx.x == 0) timeline::mark(c.timeline, timeline::kDispatchSlots);
    const uint8_t* row = x + static_cast<int64_t>(t) * H * 2;
    if (a.fmt == Format::kBF16) {
      for (int v = threadIdx.x; v < H / 8; v += blockDim.x) {
        const uint4 val = port::load16_read_once(row + v * 16);
        for (int k = 0; k < K; ++k)
          if (s_dst[k]) dev::st16(s_dst[k] + kHeaderBytes + v * 16, val);
      }
    } else {
      // 16 elements per thread; kScaleGroup / 16 = 8 consecutive threads (an aligned part of a
      // warp) form one 128-element scale group, so the group max is three shuffles.
      const int nthr = H / 16;
      for (int base = 0; base < nthr; base += blockDim.x) {  // uniform trip count: shuffles are safe
        const int v = base + threadIdx.x;
        const bool active = v < nthr;
        float f[16];
        float amax = 0.0f;
        if (active) {
          dev::bf16x8_to_float(port::load16_read_once(row + v * 32), f);
          dev::bf16x8_to_float(port::load16_read_once(row + v * 32 + 16), f + 8);
#pragma unroll
          for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(f[i]));
        }
        amax = port::warp_reduce_max<kScaleGroup / 16>(amax);
        float scale = fmaxf(amax, 1e-4f) / kFp8Max;
        if (a.round_scale) scale = port::round_scale_ue8m0(scale);
        if (active) {
          const uint4 q = cast16_fp8(f, 1.0f / scale);
          for (int k = 0; k < K; ++k)
            if (s_dst[k]) dev::st16(s_dst[k] + kHeaderBytes + v * 16, q);
          if ((v & 7) == 0) s_scale[v / 8] = scale;
        }
      }
      __syncthreads();
      const int G = H / kScaleGroup;
      for (int i = threadIdx.x; i < K * G; i += blockDim.x) {
        const int k = i / G, gi = i - k * G;
        if (s_dst[k]) reinterpret_cast<float*>(s_dst[k] + g.fp8_scale_offset())[gi] = s_scale[gi];
      }
    }
    __syncthreads();
    if (threadIdx.x < static_cast<unsigned>(K)) {
      const int e = static_cast<int>(a.topk_idx[static_cast<int64_t>(t) * K + threadIdx.x]);
      // Counted even when the write was refused (error already reported) so no warp waits forever.
      if (e >= 0 && e < E) {
        const int slot = s_proxy_slot[threadIdx.x];
        // Direct stores need no fence here: the add below releases them (observed through
        // __syncthreads) to the count warp, whose release at system scope is cumulative, so an
        // owner that acquires the count on any GPU sees them (as in the combine send).
        if (slot >= 0) {
          // The staging slot is read by a proxy (copy engine / NIC) once it sees the WRITE
          // command: order the block's stores before the push at system scope.
          port::fence_system();
          dev::push_write(
              c, proxy_tag(kTagDispatch, c.buf, e % L, g.R), e / L, g.stage_slot_off(c.buf, t, threadIdx.x),
              kCompact ? g.dispatch_msg_off(c.buf, c.rank, slot) : g.dispatch_slot_off(c.buf, e % L, c.rank, slot),
              used, e);
        }
        // Release: the WRITE push above (ring index claimed) happens-before the count warp's push.
        port::atomic_add_release_device(&c.ws.send_done[e], 1);
      }
    }
    __syncthreads();  // s_dst / s_scale are rewritten for the next token
    if (threadIdx.x == 0) timeline::mark(c.timeline, timeline::kDispatchTokens);
  }
  if (!counted) {  // a block without tokens: the barrier the first token would have given
    __syncthreads();
    count_mine(mine, E, s_count);
  }
  if (shared_count) __syncthreads();  // the histogram is complete

  // One warp per expert: count its tokens, wait until all are sent, signal the owner.
  const int warp = threadIdx.x / port::kWarpSize, lane = threadIdx.x % port::kWarpSize;
  const int nwarps = blockDim.x / port::kWarpSize;
  // Expert e goes to block e % grid (warp e / grid): spread over every block rather than packed
  // into the first E / 32 blocks, which then scanned the top-k table 32 experts deep each.
  for (int e = warp * grid + b; e < E; e += grid * nwarps) {
    int cnt = 0;
    if (shared_count) {
      cnt = s_count[e / grid];
    } else {
#pragma unroll 8
      for (int i = lane; i < nk; i += port::kWarpSize) cnt += (a.topk_idx[i] == e);
      cnt = port::warp_reduce_sum(cnt);
    }
    if (lane == 0) {
      const uint64_t start = port::now_ns();
      bool ok = true;
      // Acquire pairs with the blocks' release adds: their data writes happen-before our signal.
      while (port::load_acquire_device(&c.ws.send_done[e]) != cnt) {
        if (port::now_ns() - start > c.timeout_ns) {
          dev::report(c.err, kErrSendTimeout, c.rank, e, c.rank, cnt);
          ok = false;
          break;
        }
      }
      const int owner = e / L;
      uint8_t* base = c.peers[owner];
      ok = ok && !dev::rank_masked(c, owner);  // shrink mode: a masked owner gets no count either
      if (ok && base != nullptr) {
        // Count after data: a release (dev::store_signal) the owner pairs with its acquire.
        dev::store_signal(c, owner, reinterpret_cast<int32_t*>(base + g.dispatch_count_off(c.buf, e % L, c.rank)),
                          cnt + 1);
      } else if (ok && c.proxy.rings != nullptr) {
        // Compact: the route list (its entries were stored by the token blocks, ordered before our
        // acquire above by their fence and release add). Then the count after data: the receiving
        // proxy applies it once the `cnt` message WRITEs (and the list's) of this fence group
        // landed (kFenceCount); same ring as those WRITEs, pushed after them.
        const uint32_t tag = proxy_tag(kTagDispatch, c.buf, e % L, g.R);
        const bool list = kCompact && cnt > 0;
        if (list)
          dev::push_write(c, tag, owner, g.route_stage_off(c.buf, e, 0), g.route_off(c.buf, e % L, c.rank, 0),
                          4ull * static_cast<uint64_t>(min(cnt, T)), e);
        dev::push_count_signal(c, tag, owner, counter_of(g.dispatch_count_off(c.buf, e % L, c.rank)), cnt + 1,
                               list ? cnt + 1 : cnt, e);
      }
      c.ws.send_done[e] = 0;  // all adds for e have landed (or we timed out): ready for next call
      c.ws.send_slot[e] = 0;
      timeline::mark(c.timeline, timeline::kDispatchCounts);
    }
  }
}

template <bool kCompact, bool kHostMem>
__global__ void __launch_bounds__(kBlockThreads, 1) dispatch_kernel(const ANYEP_GRID_CONSTANT DispatchArgs a) {
  if (threadIdx.x == 0) timeline::mark(a.c.timeline, timeline::kDispatchStart);
  if (a.c.phases & kPhaseSend) send_phase<kCompact>(a);
  if (a.c.phases & kPhaseRecv) recv_phase<kCompact, kRecvTeams, kHostMem>(a);
  timeline::mark_warp(a.c.timeline, timeline::kDispatchEnd);
}

}  // namespace

cudaError_t launch_dispatch(const DispatchArgs& a, cudaStream_t stream) {
  return timeline::launch_timed("dispatch", a, stream, [stream](const DispatchArgs& t) {
    // The receive half alone (the staged hook) has a kernel of its own (ll/dispatch_recv.cu).
    if (t.c.phases == kPhaseRecv) return launch_dispatch_recv(t, stream);
    // One instantiation per dispatch layout (ll/layout.h) and buffer memory: the fast one pays
    // nothing for the other.
    return launch_dispatch_instance(t, [&](auto compact, auto host_mem) {
      dispatch_kernel<decltype(compact)::value, decltype(host_mem)::value>
          <<<t.c.num_blocks, kBlockThreads, 0, stream>>>(t);
      return cudaGetLastError();
    });
  });
}

cudaError_t preload_dispatch() {
  return load_functions(dispatch_kernel<true, false>, dispatch_kernel<true, true>, dispatch_kernel<false, false>,
                        dispatch_kernel<false, true>);
}

}  // namespace anyep::ll
