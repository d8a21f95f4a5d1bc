// anyep/src/kernels/ll/dispatch_recv.cuh — the receive phase of the low-latency dispatch, shared
// by the fused kernel (ll/dispatch.cu: send, then receive) and the receive-only kernel of the
// staged hook (ll/dispatch_recv.cu), each with its own number of teams.
// Receive: one team of a block per (local expert, source) region: wait for the count (acquire,
// system scope), reserve rows in recv_x with an atomic on the expert's row counter (arrival order,
// as DeepEP packs them) while the copy's first batch is loaded, copy payload, scales, source token
// and top-k slot by warp items; the expert's last source publishes recv_count.
// Shrink mode (c.mask set): a masked source counts as 0 tokens, and a source whose count times out
// is masked instead of failing the call.
// Everything here is in an unnamed namespace: each unit has its own copy.
#pragma once

#include <type_traits>

#include "kernels/ll/device.cuh"
#include "kernels/ll/kernels.h"

namespace anyep::ll {
namespace {

// Receive teams: a block takes several (local expert, source) regions at once, one per team of
// kRecvTeamThreads, each with its own barrier. At DeepEP's shape there are 288 regions (E x 1 at
// one rank, 144 x 2 at two) on 132 blocks: whole-block regions ran in three waves, each a wait,
// a barrier and a short copy; teams take them in one. The fused kernel (send, then receive) has
// kRecvTeams teams, its whole block; the receive-only kernel (ll/dispatch_recv.cu) kRecvOnlyTeams.
constexpr int kRecvTeams = port::kTeamBarriers ? 4 : 1;
constexpr int kRecvTeamThreads = kBlockThreads / kRecvTeams;
static_assert(kRecvTeamThreads % port::kWarpSize == 0, "a receive team is whole warps");
// The receive-only kernel: 3 teams (768 threads) give 396 team slots on 132 SMs, and the register
// cap of 768-thread blocks (80) holds the copy without spills; the fused kernel's 1024 threads
// cap it at 64 (92 B of spills), and a fourth team had no region at DeepEP's shape. Hook receive
// 9.83 / 9.84 -> 8.83 / 8.73 us (1 rank, H200, back to back; 4 teams in a kernel of its own: 9.14).
constexpr int kRecvOnlyTeams = port::kTeamBarriers ? 3 : 1;
constexpr int kRecvOnlyThreads = kRecvOnlyTeams * kRecvTeamThreads;
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

// A warp's item (row s, part `part`) of the rows: item j * kRecvWarps + warp of a chunk is row
// item / parts, part item % parts, walked here batch by batch by subtraction: `parts` is known only
// at run time, and a division by it (some 20 dependent instructions) sat between a region's count
// and its first loads.
struct RecvWalk {
  int s, part;
  __device__ __forceinline__ RecvWalk(int warp, int parts) : s(0), part(warp) { carry(parts); }
  __device__ __forceinline__ void next(int parts) {
    part += kRecvWarps;
    carry(parts);
  }
  __device__ __forceinline__ void carry(int parts) {
    for (; part >= parts; part -= parts) ++s;
  }
};

// The loads of item (row w.s, part w.part) into `it`; false when the rows have no such row.
// kHostMem: the buffer is host memory (Common::host_mem).
template <bool kCompact, bool kHostMem>
__device__ __forceinline__ bool recv_load(const DispatchArgs& a, const RecvRows& q, RecvWalk w, int lane,
                                          RecvItem& it) {
  if (w.s >= q.rows) return false;
  const Common& c = a.c;
  const int s = w.s, part = w.part;
  const uint8_t* msg = msg_of<kCompact>(q.region, q.route_chunk, q.first, s, c.g.msg_bytes());
  const int in_part = recv_nvec(a) - part * kRecvPart;  // vectors from the part's first on
  // L2 load (cg): the data arrived from another GPU during this kernel; L1 may not see it.
  const uint4* src = reinterpret_cast<const uint4*>(msg + kHeaderBytes) + part * kRecvPart + lane;
  if (in_part >= kRecvPart) {  // a whole part (every part at DeepEP's shape): no bound per vector
#pragma unroll
    for (int u = 0; u < kRecvUnroll; ++u) it.val[u] = dev::ld_recv<kHostMem>(src + u * port::kWarpSize);
  } else {
#pragma unroll
    for (int u = 0; u < kRecvUnroll; ++u)
      if (u * port::kWarpSize < in_part - lane) it.val[u] = dev::ld_recv<kHostMem>(src + u * port::kWarpSize);
  }
  if (part == 0 && lane == 0) it.head = dev::ld_recv<kHostMem>(reinterpret_cast<const int2*>(msg));
  const int W = recv_scale_words(a);
  const uint8_t* sp = msg + c.g.fp8_scale_offset();
#pragma unroll
  for (int k = 0; k < kRecvScalesPerLane; ++k) {
    const int gi = (part * kRecvScalesPerLane + k) * port::kWarpSize + lane;
    if (gi >= W) continue;
    if (a.fmt == Format::kFP8) {
      it.scale[k] = dev::ld_recv<kHostMem>(reinterpret_cast<const uint32_t*>(sp) + gi);
    } else {
      // UE8M0: the biased exponent byte of each (power-of-two) scale, 4 per int32, low byte first
      // (packed here, not at the store: one register held instead of four; a rare format).
      const float4 f = dev::ld_recv<kHostMem>(reinterpret_cast<const float4*>(sp) + gi);
      it.scale[k] = port::ue8m0_exponent(f.x) | (port::ue8m0_exponent(f.y) << 8) | (port::ue8m0_exponent(f.z) << 16) |
                    (port::ue8m0_exponent(f.w) << 24);
    }
  }
  return true;
}

// The stores of an item recv_load loaded; `begin`: the region's first row in the expert's part
// of recv_x.
__device__ __forceinline__ void recv_store(const DispatchArgs& a, const RecvRows& q, RecvWalk w, int begin, int lane,
                                           const RecvItem& it) {
  const Layout& g = a.c.g;
  const int64_t RT = g.R * g.T;
  const int s = w.s, part = w.part, nvec = recv_nvec(a), x = begin + q.first + s;  // x: in the expert's part
  const int64_t row = static_cast<int64_t>(q.l) * RT + x;
  const int in_part = nvec - part * kRecvPart;
  uint4* dst = reinterpret_cast<uint4*>(a.recv_x) + row * nvec + part * kRecvPart + lane;
  if (in_part >= kRecvPart) {  // as recv_load
#pragma unroll
    for (int u = 0; u < kRecvUnroll; ++u) dev::st16(dst + u * port::kWarpSize, it.val[u]);
  } else {
#pragma unroll
    for (int u = 0; u < kRecvUnroll; ++u)
      if (u * port::kWarpSize < in_part - lane) dev::st16(dst + u * port::kWarpSize, it.val[u]);
  }
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

template <bool kCompact, int kTeams, bool kHostMem>
__device__ void recv_phase(const DispatchArgs& a) {
  const Common& c = a.c;
  const Layout& g = c.g;
  // No division instruction on the way to a region's first loads: E = L x R pairs (validated), a
  // pair's (l, r) by Common::by_ranks, its count and region by its index p, its items by RecvWalk.
  // (Three run-time divisions sat there: E / R, p / R and item / parts.)
  const int E = static_cast<int>(g.E), R = static_cast<int>(g.R), T = static_cast<int>(g.T);
  const int parts = (recv_nvec(a) + kRecvPart - 1) / kRecvPart;  // of a row (a constant divisor)
  __shared__ int s_begin[kTeams], s_count[kTeams];
  __shared__ int s_route[kTeams][kRouteChunk];
  const int team = static_cast<int>(threadIdx.x) / kRecvTeamThreads;
  const int tt = static_cast<int>(threadIdx.x) % kRecvTeamThreads;
  const int warp = tt / port::kWarpSize, lane = tt % port::kWarpSize;
  const int team_bar = 1 + team;  // barrier 0 is __syncthreads'

  // Region p goes to block p % grid, team p / grid: every block gets its share (288 regions on 132
  // blocks: 2-3 each, taken at once). Numbering p by block first gave 72 blocks four regions and
  // left 60 SMs idle (ncu: SM active 46% of the kernel's cycles).
  for (int p = team * gridDim.x + blockIdx.x; p < E; p += gridDim.x * kTeams) {
    const int l = c.by_ranks.div(p), r = c.by_ranks.mod(p, l);
    int count = 0;
    if (tt == 0) {
      const bool direct = dev::direct_peer(c, r);
      const uint64_t sig = Layout::dispatch_count_off_at(c.buf, p);
      uint64_t waited = 0;
      bool timed_out = false;
      // A masked source (shrink mode) counts as 0 tokens; so does one that timed out (and is
      // masked now) in shrink mode. Without shrink mode a timeout is an error naming the source.
      const int v = dev::wait_signal(c, direct, sig, r, &waited, &timed_out);
      if (v == 0) {
        if (timed_out) dev::report(c.err, kErrDispatchRecvTimeout, c.rank, c.rank * c.by_ranks.div(E) + l, r, 0);
      } else {
        count = min(v - 1, T);
        // Reset for the call after next on this half: its sender is causally after our return.
        dev::reset_signal(c, direct, sig);
        // The caller's received-rows statistics, per source: an add whose result nobody reads (a
        // reduction) holds no one up. (The expert's last source loading, adding and storing the
        // total cost its team a round trip before the stores: see docs/ll.md.)
        if (a.cumulative_recv_stats) atomicAdd(a.cumulative_recv_stats + l, count);
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
        for (int s = 0; s < min(count, kRouteChunk); ++s) s_route[team][s] = dev::ld_recv<kHostMem>(route + s);
      }
    }
    port::team_sync(team_bar, kRecvTeamThreads);  // the team's first thread's acquire covers the team
    count = s_count[team];
    // Fast: rows s of (l, r) are the region's slots in order, one chunk. Compact: row s is message
    // route[s] of source r's region (written before the count we acquired), the list read into
    // shared memory a chunk at a time: one load per row, not one per 16-byte vector before each
    // data load.
    const uint8_t* region = c.local + (kCompact ? g.dispatch_msg_off(c.buf, r, 0) : g.dispatch_region_off(c.buf, p));
    const int chunk = kCompact ? kRouteChunk : max(count, 1);
    int begin = 0;
    for (int c0 = 0; c0 == 0 || c0 < count; c0 += chunk) {
      if (c0 > 0) {                                   // chunk 0 was read by the team's first thread
        port::team_sync(team_bar, kRecvTeamThreads);  // the previous chunk's entries are used
        const int32_t* route = reinterpret_cast<const int32_t*>(c.local + g.route_off(c.buf, l, r, c0));
        for (int s = tt; s < min(chunk, count - c0); s += kRecvTeamThreads)
          s_route[team][s] = dev::ld_recv<kHostMem>(route + s);
        port::team_sync(team_bar, kRecvTeamThreads);
      }
      const RecvRows q{region, s_route[team], l, c0, min(chunk, count - c0)};
      const int batches = max(1, (q.rows * parts + kRecvWarps - 1) / kRecvWarps);  // batch 0 also reserves
      RecvWalk w(warp, parts);
      for (int j = 0; j < batches; ++j, w.next(parts)) {
        RecvItem it;
        const bool loaded = recv_load<kCompact, kHostMem>(a, q, w, lane, it);
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
        if (loaded) recv_store(a, q, w, begin, lane, it);
      }
    }
    port::team_sync(team_bar, kRecvTeamThreads);  // s_begin/s_count/s_route reuse
  }
}

// The dispatch kernels come in one instantiation per layout (Layout::compact) and per memory of the
// buffer (Common::host_mem): the receive's loads then take one form each (ld_recv<kHostMem>). With
// host_mem known only at run time every load was compiled in both forms, one predicated off (ncu,
// 1 rank: the receive-only kernel issued 1.8x the instructions of DeepEP's). launch(compact,
// host_mem) gets the two as std::bool_constant.
template <class Launch>
cudaError_t launch_dispatch_instance(const DispatchArgs& a, Launch launch) {
  using T = std::true_type;
  using F = std::false_type;
  if (a.c.g.compact) return a.c.host_mem ? launch(T{}, T{}) : launch(T{}, F{});
  return a.c.host_mem ? launch(F{}, T{}) : launch(F{}, F{});
}

}  // namespace

// ll/dispatch_recv.cu: the receive half alone (phases == kPhaseRecv), kRecvOnlyThreads a block.
cudaError_t launch_dispatch_recv(const DispatchArgs& a, cudaStream_t stream);

}  // namespace anyep::ll
