// anyep/src/kernels/ll_dispatch.cu — low-latency dispatch (send and receive phases).
//
// Send: one block per token (grid-strided). Thread k < K takes the message slot (this rank, token,
// k' = its entries before k on the same owner) in e's owner's region for this rank, claims row s
// of (e's local index l, this rank), writes the 16-byte header and enters the slot in the route
// list of (l, this rank) at s (ll_layout.h); then the block
// streams the payload (BF16 copied, or FP8 cast once per token with one scale per 128 elements)
// with 16-byte stores to every destination, and counts the token as sent per expert. One warp
// per expert then waits until all of that expert's tokens are counted (its total from the
// block's shared histogram of the top-k table) and stores the count to the owner (release:
// system scope, device scope for the own rank): the count is ordered after the data it covers.
// Receive: one team of a block per (local expert, source rank) region: wait for the count
// (acquire, system scope), reserve rows in recv_x with an atomic on the expert's row counter
// (arrival order, as DeepEP packs them) while the copy's first batch is loaded, copy payload,
// scales, source token and top-k slot by warp items; the expert's last source publishes recv_count.
//
// NVLink peers get direct stores through CUDA IPC pointers (c.peers[r]); a null entry marks a
// peer behind the proxy: the message is built in this rank's staging slot (b, t, k), a WRITE
// (tag = the destination's fence group for (half, local expert)) copies it to its message slot on
// the owner, the route list staged here goes as one more WRITE, and the count as a SIGNAL with
// kFenceCount = the number of WRITEs it covers, so the receiving proxy applies it only after they
// all landed.
// Shrink mode (c.mask set): a masked owner gets neither tokens nor a count, a masked source
// counts as 0 tokens, and a source whose count times out is masked instead of failing the call.
#include "kernels/kernel_loading.cuh"
#include "kernels/ll_device.cuh"
#include "kernels/ll_kernels.h"

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
      // Compact: k' of msg_slot_in_token (ll_layout.h), the valid entries before k with the same
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
            // Layout: dispatch slot (buf, l = e % L, r = this rank, slot) — ll_layout.h.
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

// Receive teams: a block takes kRecvTeams (local expert, source) regions at once, one per team of
// kRecvTeamThreads, each with its own barrier. At DeepEP's shape there are 288 regions (E x 1 at
// one rank, 144 x 2 at two) on 132 blocks: whole-block regions ran in three waves, each a wait,
// a barrier and a short copy; four teams a block take them in one.
constexpr int kRecvTeams = port::kTeamBarriers ? 4 : 1;
constexpr int kRecvTeamThreads = kBlockThreads / kRecvTeams;
static_assert(kRecvTeamThreads % port::kWarpSize == 0, "a receive team is whole warps");
constexpr int kRouteChunk = 64;  // route entries a receive team holds at once (shared memory)
// The copy goes by warp items: a warp copies part `part` of row s, kRecvPart 16-byte vectors,
// kRecvUnroll a lane, all loaded before any is stored (one round trip). A lane's vectors are
// lane, lane + warp size, ... of the part: one base address and immediate offsets, so 7 loads in
// flight cost little more than the registers of their values. A team's warps take the items of
// its region in turn: at DeepEP's shape (448 vectors a row, 2 parts) a region of up to 4 rows is
// one round trip and one of 10 rows three. (The region's vectors numbered flat over the team, 4 a
// thread, took 2 and 5 round trips; more than 4 a thread spilled their index arithmetic.)
constexpr int kRecvUnroll = 7;
constexpr int kRecvPart = kRecvUnroll * port::kWarpSize;
constexpr int kRecvWarps = kRecvTeamThreads / port::kWarpSize;
constexpr int kRecvScalesPerLane = 2;  // scale words a lane of a part's warp carries (below)

// The message of row c0 + s of a (local expert, source) region: fast layout, the region's slots in
// order; compact, the one its route entry names (the chunk's entries, in shared memory).
template <bool kCompact>
__device__ __forceinline__ const uint8_t* msg_of(const uint8_t* region, const int* route_chunk, int c0, int s,
                                                 uint64_t M) {
  if constexpr (kCompact) return region + static_cast<int64_t>(route_chunk[s]) * M;
  return region + static_cast<int64_t>(c0 + s) * M;
}

// A team's rows [first, first + rows) of (local expert l, source r), to be copied out of the
// dispatch region into recv_x with their source token, top-k slot and scales. Compact:
// `route_chunk` holds the messages of these rows.
struct RecvRows {
  const uint8_t* region;
  const int* route_chunk;
  int l, first, rows;
};
// What a lane holds of one item: its payload vectors, its scale words (part p carries the row's
// scale words p * kRecvScalesPerLane * warp size and on, kRecvScalesPerLane a lane) and, for the
// first lane of part 0, the row's header.
struct RecvItem {
  uint4 val[kRecvUnroll];
  uint32_t scale[kRecvScalesPerLane];  // FP8: the float's bits; UE8M0: kUe8m0Pack exponent bytes
  int2 head;                           // source token, top-k slot
};

__device__ __forceinline__ int recv_scale_words(const DispatchArgs& a) {
  const int G = static_cast<int>(a.c.g.H) / kScaleGroup;
  return a.fmt == Format::kFP8 ? G : a.fmt == Format::kFP8UE8M0 ? G / kUe8m0Pack : 0;
}
__device__ __forceinline__ int recv_nvec(const DispatchArgs& a) {
  return static_cast<int>(a.fmt == Format::kBF16 ? 2 * a.c.g.H : a.c.g.H) / 16;
}
// A part's vectors span at most as many scale groups (FP8: 16 values a vector) as its lanes carry
// words, so the parts of a row carry all of the row's scale words.
static_assert(kRecvUnroll * 16 <= kScaleGroup * kRecvScalesPerLane, "every scale word of a row has a part");

// Item `item` of the rows (row item / parts, part item % parts): its loads into `it`. Returns the
// row, or -1 when the rows have no such item.
template <bool kCompact>
__device__ __forceinline__ int recv_load(const DispatchArgs& a, const RecvRows& q, int parts, int item, int lane,
                                         RecvItem& it) {
  if (item >= q.rows * parts) return -1;
  const Common& c = a.c;
  const int s = item / parts, part = item - s * parts;
  const uint8_t* msg = msg_of<kCompact>(q.region, q.route_chunk, q.first, s, c.g.msg_bytes());
  const int left = recv_nvec(a) - part * kRecvPart - lane;  // this lane's vectors: those below left
  // L2 load (cg): the data arrived from another GPU during this kernel; L1 may not see it.
  const uint4* src = reinterpret_cast<const uint4*>(msg + kHeaderBytes) + part * kRecvPart + lane;
#pragma unroll
  for (int u = 0; u < kRecvUnroll; ++u)
    if (u * port::kWarpSize < left) it.val[u] = dev::ld_recv(src + u * port::kWarpSize, c.host_mem);
  if (part == 0 && lane == 0) it.head = dev::ld_recv(reinterpret_cast<const int2*>(msg), c.host_mem);
  const int W = recv_scale_words(a);
  const uint8_t* sp = msg + c.g.fp8_scale_offset();
#pragma unroll
  for (int k = 0; k < kRecvScalesPerLane; ++k) {
    const int gi = (part * kRecvScalesPerLane + k) * port::kWarpSize + lane;
    if (gi >= W) continue;
    if (a.fmt == Format::kFP8) {
      it.scale[k] = dev::ld_recv(reinterpret_cast<const uint32_t*>(sp) + gi, c.host_mem);
    } else {
      // UE8M0: the biased exponent byte of each (power-of-two) scale, 4 per int32, low byte first
      // (packed here, not at the store: one register held instead of four; a rare format).
      const float4 f = dev::ld_recv(reinterpret_cast<const float4*>(sp) + gi, c.host_mem);
      it.scale[k] = port::ue8m0_exponent(f.x) | (port::ue8m0_exponent(f.y) << 8) | (port::ue8m0_exponent(f.z) << 16) |
                    (port::ue8m0_exponent(f.w) << 24);
    }
  }
  return s;
}

// The stores of an item loaded for row s (s >= 0); `begin`: the region's first row in the
// expert's part of recv_x.
__device__ __forceinline__ void recv_store(const DispatchArgs& a, const RecvRows& q, int parts, int item, int s,
                                           int begin, int lane, const RecvItem& it) {
  const Layout& g = a.c.g;
  const int64_t RT = g.R * g.T;
  const int part = item - s * parts, nvec = recv_nvec(a), x = begin + q.first + s;  // x: in the expert's part
  const int64_t row = static_cast<int64_t>(q.l) * RT + x;
  const int left = nvec - part * kRecvPart - lane;
  uint4* dst = reinterpret_cast<uint4*>(a.recv_x) + row * nvec + part * kRecvPart + lane;
#pragma unroll
  for (int u = 0; u < kRecvUnroll; ++u)
    if (u * port::kWarpSize < left) dev::st16(dst + u * port::kWarpSize, it.val[u]);
  if (part == 0 && lane == 0) {
    a.src_info[row] = it.head.x;
    a.src_topk[row] = it.head.y;
  }
  const int W = recv_scale_words(a);
#pragma unroll
  for (int k = 0; k < kRecvScalesPerLane; ++k) {
    const int gi = (part * kRecvScalesPerLane + k) * port::kWarpSize + lane;
    // [L, W, R*T]: the column-major view of the scales (FP8: fp32; UE8M0: packed int32).
    if (gi < W) static_cast<uint32_t*>(a.recv_scales)[(static_cast<int64_t>(q.l) * W + gi) * RT + x] = it.scale[k];
  }
}

template <bool kCompact>
__device__ void recv_phase(const DispatchArgs& a) {
  const Common& c = a.c;
  const Layout& g = c.g;
  const int L = static_cast<int>(g.L()), R = static_cast<int>(g.R), T = static_cast<int>(g.T);
  __shared__ int s_begin[kRecvTeams], s_count[kRecvTeams];
  __shared__ int s_route[kRecvTeams][kRouteChunk];
  const int team = static_cast<int>(threadIdx.x) / kRecvTeamThreads;
  const int tt = static_cast<int>(threadIdx.x) % kRecvTeamThreads;
  const int warp = tt / port::kWarpSize, lane = tt % port::kWarpSize;
  const int team_bar = 1 + team;  // barrier 0 is __syncthreads'

  // Region p goes to block p % grid, team p / grid: every block gets its share (288 regions on 132
  // blocks: 2-3 each, taken at once). Numbering p by block first gave 72 blocks four regions and
  // left 60 SMs idle (ncu: SM active 46% of the kernel's cycles).
  for (int p = team * gridDim.x + blockIdx.x; p < L * R; p += gridDim.x * kRecvTeams) {
    const int l = p / R, r = p % R;
    int count = 0;
    if (tt == 0) {
      const bool direct = dev::direct_peer(c, r);
      const uint64_t sig = g.dispatch_count_off(c.buf, l, r);
      uint64_t waited = 0;
      bool timed_out = false;
      // A masked source (shrink mode) counts as 0 tokens; so does one that timed out (and is
      // masked now) in shrink mode. Without shrink mode a timeout is an error naming the source.
      const int v = dev::wait_signal(c, direct, sig, r, &waited, &timed_out);
      if (v == 0) {
        if (timed_out) dev::report(c.err, kErrDispatchRecvTimeout, c.rank, c.rank * L + l, r, 0);
      } else {
        count = min(v - 1, T);
        // Reset for the call after next on this half: its sender is causally after our return.
        dev::reset_signal(c, direct, sig);
      }
      if (a.wait_recv_cost_stats)
        atomicAdd(reinterpret_cast<unsigned long long*>(a.wait_recv_cost_stats + r),
                  static_cast<unsigned long long>(waited));
      s_count[team] = count;
      timeline::mark(c.timeline, timeline::kDispatchWait);
      if constexpr (kCompact) {
        // The first chunk of the route list (below), read here after the acquire: independent
        // loads, one round trip, and no team barrier of its own.
        const int32_t* route = reinterpret_cast<const int32_t*>(c.local + g.route_off(c.buf, l, r, 0));
        for (int s = 0; s < min(count, kRouteChunk); ++s) s_route[team][s] = dev::ld_recv(route + s, c.host_mem);
      }
    }
    port::team_sync(team_bar, kRecvTeamThreads);  // the team's first thread's acquire covers the team
    count = s_count[team];
    // Fast: rows s of (l, r) are the region's slots in order, one chunk. Compact: row s is message
    // route[s] of source r's region (written before the count we acquired), the list read into
    // shared memory a chunk at a time: one load per row, not one per 16-byte vector before each
    // data load.
    const uint8_t* region =
        c.local + (kCompact ? g.dispatch_msg_off(c.buf, r, 0) : g.dispatch_slot_off(c.buf, l, r, 0));
    const int chunk = kCompact ? kRouteChunk : max(count, 1);
    int begin = 0;
    for (int c0 = 0; c0 == 0 || c0 < count; c0 += chunk) {
      if (c0 > 0) {                                   // chunk 0 was read by the team's first thread
        port::team_sync(team_bar, kRecvTeamThreads);  // the previous chunk's entries are used
        const int32_t* route = reinterpret_cast<const int32_t*>(c.local + g.route_off(c.buf, l, r, c0));
        for (int s = tt; s < min(chunk, count - c0); s += kRecvTeamThreads)
          s_route[team][s] = dev::ld_recv(route + s, c.host_mem);
        port::team_sync(team_bar, kRecvTeamThreads);
      }
      const RecvRows q{region, s_route[team], l, c0, min(chunk, count - c0)};
      const int parts = (recv_nvec(a) + kRecvPart - 1) / kRecvPart;
      const int batches = max(1, (q.rows * parts + kRecvWarps - 1) / kRecvWarps);  // batch 0 also reserves
      for (int j = 0; j < batches; ++j) {
        RecvItem it;
        const int item = j * kRecvWarps + warp;
        const int s = recv_load<kCompact>(a, q, parts, item, lane, it);
        if (c0 == 0 && j == 0) {
          // The reservation goes out after batch 0's loads: its atomic and the loads take one
          // round trip together, and only the stores need `begin`. (Sent before the loads, it
          // measured slower: hook receive 10.13 / 10.15 us against 9.88 / 9.90.)
          if (tt == 0) {
            // One add counts the rows and the arrival (Workspace::recv_arrivals): the adds to one
            // word are totally ordered, so the one that finds R - 1 arrivals is last and the rows
            // before it plus its own are the expert's total.
            const unsigned long long old =
                atomicAdd(&c.ws.recv_arrivals[l], (1ull << 32) | static_cast<unsigned>(count));
            const int first = static_cast<int>(static_cast<uint32_t>(old));  // bits 0..31: rows before
            if (static_cast<int>(old >> 32) == R - 1) {
              a.recv_count[l] = first + count;
              if (a.cumulative_recv_stats) a.cumulative_recv_stats[l] += first + count;
              // Every source of l has added: the next adds are the next call's, after this kernel.
              c.ws.recv_arrivals[l] = 0ull;
            }
            if (p == 0 && a.handle_half) *a.handle_half = c.buf;
            a.layout_range[static_cast<int64_t>(l) * R + r] = (static_cast<int64_t>(first) << 32) | count;
            s_begin[team] = first;
          }
          port::team_sync(team_bar, kRecvTeamThreads);  // s_begin
          begin = s_begin[team];
          if (tt == 0) timeline::mark(c.timeline, timeline::kDispatchReserve);
        }
        if (s >= 0) recv_store(a, q, parts, item, s, begin, lane, it);
      }
    }
    port::team_sync(team_bar, kRecvTeamThreads);  // s_begin/s_count/s_route reuse
  }
}

template <bool kCompact>
__global__ void __launch_bounds__(kBlockThreads, 1) dispatch_kernel(const ANYEP_GRID_CONSTANT DispatchArgs a) {
  if (threadIdx.x == 0) timeline::mark(a.c.timeline, timeline::kDispatchStart);
  if (a.c.phases & kPhaseSend) send_phase<kCompact>(a);
  if (a.c.phases & kPhaseRecv) recv_phase<kCompact>(a);
  timeline::mark_warp(a.c.timeline, timeline::kDispatchEnd);
}

}  // namespace

cudaError_t launch_dispatch(const DispatchArgs& a, cudaStream_t stream) {
  return timeline::launch_timed("dispatch", a, stream, [stream](const DispatchArgs& t) {
    // One instantiation per dispatch layout (ll_layout.h): the fast one pays nothing for the other.
    if (t.c.g.compact)
      dispatch_kernel<true><<<t.c.num_blocks, kBlockThreads, 0, stream>>>(t);
    else
      dispatch_kernel<false><<<t.c.num_blocks, kBlockThreads, 0, stream>>>(t);
    return cudaGetLastError();
  });
}

cudaError_t preload_dispatch() { return load_functions(dispatch_kernel<true>, dispatch_kernel<false>); }

}  // namespace anyep::ll
