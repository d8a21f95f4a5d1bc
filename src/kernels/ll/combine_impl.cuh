// anyep/src/kernels/ll/combine_impl.cuh — low-latency combine (send and receive phases).
//
// Send (on the rank owning the experts): one block per local expert (grid-strided). For every
// row of recv_x that came from source rank r, the BF16 expert output goes straight into the
// private slot (token, top-k slot) on r (ll/layout.h: combine slot). A row stored directly as
// BF16 then gets its own flag in the slot's header (combine_row_flag: release after the block's
// barrier, system scope, device scope for the own rank), so the home rank waits per row. LogFMT
// rows (whose header holds their encode mask) and rows through the proxy are covered by the
// expert's flag instead: after all rows of the expert, one thread per rank stores it (release,
// system scope), also on ranks that received nothing from this expert, which is how a home rank
// learns "nothing more is coming". A flag holds the number of the call on its buffer half (its
// epoch, Workspace::combine_epoch) rather than 1, so nobody resets it. Through the proxy the flag
// is a SIGNAL adding 1 (below).
// (The balanced send, send_balanced below, spreads the rows of all experts over the blocks.)
// A home rank behind the proxy: each row is staged in the dispatch slot it arrived in (half b_d of
// the handle's dispatch, stage_row_off: consumed already, and not rewritten before rank r has
// received this combine), a WRITE per row copies it to the home slot, and the expert's flag goes
// as a SIGNAL with kFenceCount = the rows it covers, in the same ring after them.
// Receive (home rank): one block per token: wait for the flags of the token's rows (or of its
// experts: LogFMT, proxy) (acquire, system scope) to reach this call's epoch, then
// out[t] = sum_k w[t,k] * slot[t,k] in FP32, in slot order (the same sum on every run), stored as
// BF16. With direct owners only there is no last-block pass: a flag no token waited on is simply
// overtaken by the next call's (a last block that waited for every flag and reset them gave the
// receive a grid-wide tail). Flags through the proxy are counters that only add: they keep that
// pass (Workspace::combine_epoch says why).
// Shrink mode (c.mask set): nothing is sent to a masked rank, and the experts of a masked owner
// are not waited for and contribute nothing; an owner whose flag times out is masked.
// LogFMT (a.logfmt): each row goes encoded (logfmt.h; row layout in ll/layout.h), written by
// send_rows_logfmt in place of the BF16 copy, and decoded by reduce_token_logfmt on the home rank.
// Both are kept out of line, so that the BF16 path keeps its registers (no spills).
//
// Included by ll/combine.cu (the kernel for the fast dispatch layout, and the launcher) and by
// ll/combine_compact.cu (the compact layout's): one kernel per translation unit. Two kernels in one
// unit, even two copies of this same code, made ptxas spill in both (8 B stored, 24 B loaded); the
// fast layout's hook combine send measured 20.6 us that way and 19.9 us split, on an H200
// (docs/bench/ll.md). Everything here is in an unnamed namespace: each unit has its own copy.
#pragma once

#include "kernels/ll/device.cuh"
#include "kernels/ll/kernels.h"
#include "kernels/ll/logfmt.h"

namespace anyep::ll {
namespace {

constexpr int kTeam = logfmt::kLanesPerGroup;  // lanes that encode one group together
constexpr int kLogfmtChunkRows = 64;           // rows whose encode masks a block holds at once
constexpr int kSendChunkRows = 128;            // balanced send: rows whose source and target a block maps at once
constexpr int kSendUnroll = 4;                 // balanced send: 16-byte loads in flight per thread
static_assert(kBlockThreads % kTeam == 0, "a block is whole teams");

// The block's count of combine calls so far on this call's buffer half, for `phase` (0 send, 1
// receive): Workspace::combine_epoch. A phase reads it where it starts and uses it late (flags,
// waits), so the load costs no round trip of its own, and writes it back, plus one, once no
// thread of the block reads it any more.
__device__ __forceinline__ uint32_t* epoch_word(const Common& c, int phase) {
  return c.ws.combine_epoch + (c.buf * 2 + phase) * kMaxBlocks + blockIdx.x;
}

// A team's (amax, amin) of its group; every lane of the warp must call this (on = false: a lane
// without a group this round, neutral).
__device__ __forceinline__ logfmt::Range team_range(const uint4& v, bool on) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  logfmt::Range r = on ? logfmt::lane_range(w) : logfmt::Range{0.0f, INFINITY};
  r.amax = port::warp_reduce_max<kTeam>(r.amax);
  r.amin = port::warp_reduce_min<kTeam>(r.amin);
  return r;
}

// Where row s of (local expert l, source rank r) is staged for a rank behind the proxy: the slot it
// arrived in, dispatch half bd (fast layout: (bd, l, r, s); compact: the message its route entry
// names; ll/layout.h, dispatch send staging).
template <bool kCompact>
__device__ __forceinline__ uint64_t stage_row_off(const Common& c, int bd, int l, int r, int s) {
  if constexpr (kCompact) {
    const int32_t m = dev::ld_recv(reinterpret_cast<const int32_t*>(c.local + c.g.route_off(bd, l, r, s)), c.host_mem);
    return c.g.dispatch_msg_off(bd, r, m);
  } else {
    return c.g.dispatch_slot_off(bd, l, r, s);
  }
}

// The `count` rows of (local expert l, rank r) that start at row `begin` of the expert's part of
// x, as LogFMT rows: into their home slots on r (`peer`, direct stores) or, for a rank behind the
// proxy (`peer` null), into their staging slots (stage_row_off) with one WRITE per row of the bytes
// the row uses. A team of 16 lanes takes one group at a time. Where a group goes depends on the
// groups before it, so a chunk of rows takes two passes: which groups encode (the masks, in shared
// memory), then the groups, the meta words and the row headers. Block-uniform arguments only.
template <bool kCompact>
__device__ __noinline__ void send_rows_logfmt(const CombineArgs& a, int l, int r, int begin, int count, uint8_t* peer,
                                              int bd) {
  const Common& c = a.c;
  const Layout& g = c.g;
  const int L = static_cast<int>(g.L()), G = static_cast<int>(g.groups());
  const int64_t H = g.H, row0 = static_cast<int64_t>(l) * g.R * g.T + begin;
  const int teams = static_cast<int>(blockDim.x) / kTeam, team = threadIdx.x / kTeam, q = threadIdx.x % kTeam;
  const uint8_t* x = static_cast<const uint8_t*>(a.x);
  __shared__ uint32_t s_mask[kLogfmtChunkRows][kLogfmtMaskWords];

  for (int s0 = 0; s0 < count; s0 += kLogfmtChunkRows) {
    const int rows = min(kLogfmtChunkRows, count - s0), items = rows * G;
    for (int i = threadIdx.x; i < rows * kLogfmtMaskWords; i += blockDim.x)
      s_mask[i / kLogfmtMaskWords][i % kLogfmtMaskWords] = 0u;
    __syncthreads();
    // Both passes run the same number of rounds on every thread: the team reductions need the
    // whole warp, also lanes whose team has no group left.
    for (int pass = 0; pass < 2; ++pass) {
      for (int base = 0; base < items; base += teams) {
        const int item = base + team;
        const bool on = item < items;
        const int s = on ? item / G : 0, grp = on ? item - s * G : 0;
        const int64_t row = row0 + s0 + s;
        const uint4 v = on ? port::load16_read_once(x + (row * H + grp * logfmt::kGroup + q * logfmt::kLaneValues) * 2)
                           : make_uint4(0u, 0u, 0u, 0u);
        const logfmt::Range rg = team_range(v, on);
        if (!on) continue;
        const logfmt::Params p = logfmt::params(rg.amax, rg.amin);
        const uint32_t* mask = s_mask[s];
        if (pass == 0) {
          if (q == 0 && p.encode) atomicOr(&s_mask[s][grp / kMaskWordBits], 1u << (grp % kMaskWordBits));
          continue;
        }
        uint8_t* dst = peer != nullptr ? peer + g.combine_slot_off(c.buf, a.src_info[row], a.src_topk[row])
                                       : c.local + stage_row_off<kCompact>(c, bd, l, r, s0 + s);
        const int before = logfmt_before(mask, grp);
        uint8_t* gp = dst + Layout::logfmt_group_off(grp, before);
        if (p.encode) {
          const uint32_t w[4] = {v.x, v.y, v.z, v.w};
          const logfmt::LaneCode code = logfmt::encode_lane(w, p);
          *reinterpret_cast<uint2*>(gp + q * 8) = make_uint2(code.low[0], code.low[1]);
          *reinterpret_cast<uint16_t*>(gp + logfmt::kLowBytes + 2 * q) = static_cast<uint16_t>(code.plane);
          if (q == 0)
            *reinterpret_cast<uint32_t*>(dst + g.logfmt_meta_off(logfmt_total(mask), before)) =
                logfmt::pack_meta(rg.amax, rg.amin);
        } else {
          dev::st16(gp + q * 16, v);
        }
        if (grp == 0 && q < kLogfmtMaskWords) reinterpret_cast<uint32_t*>(dst)[q] = mask[q];  // the row header
      }
      __syncthreads();  // pass 1's masks are complete before pass 2; pass 2's rows before the WRITEs
    }
    if (peer == nullptr) {
      const uint32_t tag = proxy_tag(kTagCombine, c.buf, l, g.R);
      for (int s = threadIdx.x; s < rows; s += blockDim.x) {
        const int64_t row = row0 + s0 + s;
        port::fence_system();
        dev::push_write(c, tag, r, stage_row_off<kCompact>(c, bd, l, r, s0 + s),
                        g.combine_slot_off(c.buf, a.src_info[row], a.src_topk[row]),
                        g.logfmt_row_bytes(logfmt_total(s_mask[s])), c.rank * L + l);
      }
      __syncthreads();  // the next chunk rewrites s_mask
    }
  }
}

// The 8 values of 16-byte vector v (values 8v..8v+7) of the row at `row` (a combine slot), as
// floats: a BF16 row holds them at [16 + 16v, ...); a LogFMT row (`mask`: its header, as read)
// holds group v / 16 encoded or as BF16. kHostMem: Common::host_mem (ld_recv<kHostMem>).
template <bool kLogfmt, bool kHostMem>
__device__ __forceinline__ void row_values(const Layout& g, const uint8_t* row, const uint32_t* mask, int v,
                                           float out[8]) {
  const uint4* raw = reinterpret_cast<const uint4*>(row + kHeaderBytes) + v;
  if constexpr (kLogfmt) {
    const int grp = v / kTeam, q = v % kTeam;
    const int before = logfmt_before(mask, grp);
    const uint8_t* gp = row + Layout::logfmt_group_off(grp, before);
    if ((mask[grp / kMaskWordBits] >> (grp % kMaskWordBits)) & 1u) {
      const uint32_t meta = dev::ld_recv<kHostMem>(
          reinterpret_cast<const unsigned int*>(row + g.logfmt_meta_off(logfmt_total(mask), before)));
      const uint2 low = dev::ld_recv<kHostMem>(reinterpret_cast<const uint2*>(gp) + q);
      const uint32_t plane =
          dev::ld_recv<kHostMem>(reinterpret_cast<const unsigned short*>(gp + logfmt::kLowBytes) + q);
      logfmt::decode_lane(low.x, low.y, plane, logfmt::params_of_meta(meta), out);
      return;
    }
    raw = reinterpret_cast<const uint4*>(gp) + q;
  }
  dev::bf16x8_to_float(dev::ld_recv<kHostMem>(raw), out);
}

// out[t] = sum over the top-k slots j in `valid` (a bit per slot) of s_w[j] * row s_src[j], in
// FP32 and in slot order (the same sum every time: DeepEP's pressure test compares outputs bit for
// bit), stored as BF16 (the block's threads split the row's 16-byte vectors). One instantiation per
// memory of the buffer: with host_mem known only at run time, each load of the sum was compiled in
// both forms, one predicated off (as in the dispatch receive, ll/dispatch_recv.cuh).
template <bool kLogfmt, bool kHostMem>
__device__ __forceinline__ void reduce_token(const Common& c, port::bf16* out, int t, uint32_t valid,
                                             const uint8_t* const* s_src, const float* s_w,
                                             const uint32_t (*s_mask)[kLogfmtMaskWords]) {
  const int H = static_cast<int>(c.g.H);
  for (int v = threadIdx.x; v < H / 8; v += blockDim.x) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (uint32_t m = valid; m != 0; m &= m - 1) {
      const int j = port::lowest_bit64(m);
      float f[8];
      row_values<kLogfmt, kHostMem>(c.g, s_src[j], s_mask[j], v, f);
      const float w = s_w[j];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] += w * f[i];
    }
    uint4 o;
    uint32_t* ob = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
    for (int i = 0; i < 4; ++i) ob[i] = port::float2_to_bf16x2(acc[2 * i], acc[2 * i + 1]);
    dev::st16(out + static_cast<int64_t>(t) * H + v * 8, o);
  }
}
// reduce_token for the buffer's memory: one uniform branch on the kernel argument.
template <bool kLogfmt>
__device__ __forceinline__ void reduce_token_in(const Common& c, port::bf16* out, int t, uint32_t valid,
                                                const uint8_t* const* s_src, const float* s_w,
                                                const uint32_t (*s_mask)[kLogfmtMaskWords]) {
  if (c.host_mem)
    reduce_token<kLogfmt, true>(c, out, t, valid, s_src, s_w, s_mask);
  else
    reduce_token<kLogfmt, false>(c, out, t, valid, s_src, s_w, s_mask);
}
__device__ __noinline__ void reduce_token_logfmt(const Common& c, port::bf16* out, int t, uint32_t valid,
                                                 const uint8_t* const* s_src, const float* s_w,
                                                 const uint32_t (*s_mask)[kLogfmtMaskWords]) {
  reduce_token_in<true>(c, out, t, valid, s_src, s_w, s_mask);
}

// Exclusive prefix sum, over the block, of the row counts of all (local expert l, rank r) pairs,
// p = l * R + r (layout_range's order): s_first[p] = rows of the pairs before p, s_first[P] = all;
// s_begin[p] = the pair's first row in its expert's part of x.
// Each thread sums a contiguous run of pairs, then the runs' totals are scanned a warp at a time.
__device__ __forceinline__ void scan_pair_rows(const int64_t* layout_range, int P, int* s_first, int* s_begin) {
  constexpr int kWarps = kBlockThreads / port::kWarpSize;
  constexpr int kPerThread = (kMaxExperts + kBlockThreads - 1) / kBlockThreads;
  static_assert(kWarps <= port::kWarpSize, "one warp scans the warps' totals");
  __shared__ int s_warp[kWarps];
  const int lane = static_cast<int>(threadIdx.x) % port::kWarpSize,
            warp = static_cast<int>(threadIdx.x) / port::kWarpSize;
  const int first = static_cast<int>(threadIdx.x) * kPerThread;
  int cnt[kPerThread], run = 0;
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int64_t range = first + u < P ? layout_range[first + u] : 0;
    cnt[u] = static_cast<int>(static_cast<uint32_t>(range));
    if (first + u < P) s_begin[first + u] = static_cast<int>(range >> 32);
    run += cnt[u];
  }
  int incl = run;  // inclusive scan of the runs within the warp
  for (int d = 1; d < port::kWarpSize; d *= 2) {
    const int y = port::warp_shuffle(incl, lane >= d ? lane - d : lane);
    if (lane >= d) incl += y;
  }
  if (lane == port::kWarpSize - 1) s_warp[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int t = lane < kWarps ? s_warp[lane] : 0, ti = t;
    for (int d = 1; d < port::kWarpSize; d *= 2) {
      const int y = port::warp_shuffle(ti, lane >= d ? lane - d : lane);
      if (lane >= d) ti += y;
    }
    if (lane < kWarps) s_warp[lane] = ti - t;  // rows of the warps before
  }
  __syncthreads();
  int at = s_warp[warp] + incl - run;
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    if (first + u < P) s_first[first + u] = at;
    at += cnt[u];
  }
  if (first < P && first + kPerThread >= P) s_first[P] = at;  // the thread holding the last pair
  __syncthreads();
}

// Combine send when every peer takes direct stores and rows go as BF16: the rows of all pairs,
// numbered pair by pair (scan_pair_rows), are cut into one contiguous, equal share per block, so
// every block moves the same bytes however the rows spread over experts (one block per expert
// left most SMs idle while a few took three experts: 288 experts on 132 blocks). Each row gets its
// own flag (combine_row_flag in its slot's header) once the block has stored it, so no block waits
// for another: a pair's rows may span blocks, and a per-pair count completed across blocks cost an
// acquire-release add and a second release after the rows (about 4 us between the last row stored
// and the flags at one rank on an H200, docs/bench/ll.md).
__device__ __noinline__ void send_balanced(const CombineArgs& a) {
  const Common& c = a.c;
  const Layout& g = c.g;
  const int L = static_cast<int>(g.L()), R = static_cast<int>(g.R), T = static_cast<int>(g.T);
  const int P = L * R, nvec = static_cast<int>(g.H) / 8;
  const uint8_t* x = static_cast<const uint8_t*>(a.x);
  __shared__ int s_first[kMaxExperts + 1];
  __shared__ int s_begin[kMaxExperts];  // first row of pair p in the expert's part of x
  __shared__ const uint4* s_src[kSendChunkRows];
  __shared__ uint4* s_dst[kSendChunkRows];  // null: the row is not sent (masked rank)
  __shared__ int s_rank[kSendChunkRows];    // the row's home rank
  __shared__ uint32_t s_epoch;

  // The last thread (no pair counts to load in the scan at P <= 4092) reads the epoch; the scan's
  // barriers publish it, and from then on the block reads the shared copy.
  const bool last = threadIdx.x == blockDim.x - 1;
  if (last) s_epoch = *epoch_word(c, 0) + 1;
  scan_pair_rows(a.layout_range, P, s_first, s_begin);
  const uint32_t epoch = s_epoch;
  if (last) *epoch_word(c, 0) = epoch;
  if (threadIdx.x == 0) timeline::mark(c.timeline, timeline::kCombineScan);
  const int64_t N = s_first[P];
  const int blocks = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
  const int i0 = share_begin(N, b, blocks), i1 = share_begin(N, b + 1, blocks);
  for (int c0 = i0; c0 < i1; c0 += kSendChunkRows) {
    const int rows = min(kSendChunkRows, i1 - c0);
    if (threadIdx.x < static_cast<unsigned>(rows)) {
      const int i = c0 + static_cast<int>(threadIdx.x), p = pair_of_row(s_first, P, i);
      const int l = p / R, r = p % R;
      const int64_t row = static_cast<int64_t>(l) * R * T + s_begin[p] + (i - s_first[p]);
      uint8_t* base = c.peers[r];
      s_rank[threadIdx.x] = r;
      s_src[threadIdx.x] = reinterpret_cast<const uint4*>(x + row * 2 * g.H);
      // Layout: combine slot (buf, token t on rank r, top-k slot k) — ll/layout.h.
      s_dst[threadIdx.x] =
          base == nullptr || dev::rank_masked(c, r)
              ? nullptr
              : reinterpret_cast<uint4*>(base + g.combine_values_off(c.buf, a.src_info[row], a.src_topk[row]));
    }
    __syncthreads();
    const int total = rows * nvec;
    // Later rounds (more than kSendUnroll vectors a thread): kSendUnroll loads in flight per thread
    // before their stores.
    for (int j0 = threadIdx.x; j0 < total; j0 += kSendUnroll * blockDim.x) {
      uint4 val[kSendUnroll];
      uint4* dst[kSendUnroll];
#pragma unroll
      for (int u = 0; u < kSendUnroll; ++u) {
        const int j = j0 + u * static_cast<int>(blockDim.x);
        dst[u] = nullptr;
        if (j >= total) continue;
        const int s = j / nvec, v = j - s * nvec;
        if (s_dst[s] == nullptr) continue;
        dst[u] = s_dst[s] + v;
        val[u] = port::load16_read_once(s_src[s] + v);
      }
#pragma unroll
      for (int u = 0; u < kSendUnroll; ++u)
        if (dst[u] != nullptr) dev::st16(dst[u], val[u]);
    }
    __syncthreads();  // the chunk's rows are stored; from here each thread touches its own entries only
    if (threadIdx.x == 0) timeline::mark(c.timeline, timeline::kCombineCopy);
    // Memory ordering: the barrier orders every thread's stores of the row before this thread's
    // release (cumulative), at system scope for another rank's GPU and device scope for the own
    // (dev::store_signal); the home rank acquires the flag before it reads the row. The flag is the
    // slot's first word, kHeaderBytes before the values (ll/layout.h; test_ll_layout checks it).
    if (threadIdx.x < static_cast<unsigned>(rows) && s_dst[threadIdx.x] != nullptr)
      dev::store_signal(c, s_rank[threadIdx.x],
                        reinterpret_cast<uint64_t*>(reinterpret_cast<uint8_t*>(s_dst[threadIdx.x]) - kHeaderBytes),
                        combine_row_flag(epoch));
  }
  // A rank without direct stores cannot get rows here (no proxy): report it (no table load when
  // the launch says every rank takes direct stores).
  for (int p = blockIdx.x + threadIdx.x * gridDim.x; !c.all_direct && p < P; p += gridDim.x * blockDim.x) {
    const int r = p % R, rows = s_first[p + 1] - s_first[p];
    if (rows > 0 && c.peers[r] == nullptr) dev::report(c.err, kErrNoPeer, c.rank, c.rank * L + p / R, r, rows);
  }
  timeline::mark_warp(c.timeline, timeline::kCombineFlags);
}

// The row flags (combine_row_flag) of local expert l's BF16 rows on every rank that takes direct
// stores and is not masked; the caller's block barrier has ordered the rows before them. Kept out
// of line: inlined, it made the kernel spill.
__device__ __noinline__ void flag_rows(const CombineArgs& a, int l, uint32_t epoch) {
  const Common& c = a.c;
  const Layout& g = c.g;
  const int R = static_cast<int>(g.R);
  const int64_t RT = static_cast<int64_t>(R) * g.T;
  for (int r = 0; r < R; ++r) {
    uint8_t* base = c.peers[r];
    if (base == nullptr || dev::rank_masked(c, r)) continue;
    const int64_t range = a.layout_range[static_cast<int64_t>(l) * R + r];
    const int64_t row0 = static_cast<int64_t>(l) * RT + static_cast<int>(range >> 32);
    for (int s = threadIdx.x; s < static_cast<int>(static_cast<uint32_t>(range)); s += blockDim.x)
      dev::store_signal(
          c, r,
          reinterpret_cast<uint64_t*>(base + g.combine_row_flag_off(c.buf, a.src_info[row0 + s], a.src_topk[row0 + s])),
          combine_row_flag(epoch));
  }
}

// Combine send with one block per local expert (grid-strided): the path for peers behind the proxy
// (rows staged, one WRITE each, then the flag as a counted SIGNAL) and for LogFMT rows.
template <bool kCompact>
__device__ __forceinline__ void send_per_expert(const CombineArgs& a) {
  const Common& c = a.c;
  const uint32_t epoch = *epoch_word(c, 0) + 1;
  const Layout& g = c.g;
  const int L = static_cast<int>(g.L()), R = static_cast<int>(g.R), T = static_cast<int>(g.T);
  const int H = static_cast<int>(g.H);
  const int64_t RT = static_cast<int64_t>(R) * T;
  const int nvec = H / 8;  // 16-byte vectors per BF16 row
  const uint8_t* x = static_cast<const uint8_t*>(a.x);

  const bool proxy = c.proxy.rings != nullptr;
  const int bd = proxy ? *a.handle_half : 0;  // dispatch half of the handle: staging rows live there

  if (threadIdx.x == 0) timeline::mark(c.timeline, timeline::kCombineScan);
  for (int l = blockIdx.x; l < L; l += gridDim.x) {
    for (int r = 0; r < R; ++r) {
      if (dev::rank_masked_block(c, r)) continue;  // shrink mode: nothing goes to a masked rank
      uint8_t* base = c.peers[r];
      const int64_t range = a.layout_range[static_cast<int64_t>(l) * R + r];
      const int begin = static_cast<int>(range >> 32), count = static_cast<int>(static_cast<uint32_t>(range));
      const int64_t row0 = static_cast<int64_t>(l) * RT + begin;
      if (base == nullptr && !proxy) {
        if (threadIdx.x == 0 && count > 0) dev::report(c.err, kErrNoPeer, c.rank, c.rank * L + l, r, count);
        continue;
      }
      if (a.logfmt) {
        send_rows_logfmt<kCompact>(a, l, r, begin, count, base, bd);
        continue;
      }
      if (base == nullptr) {
        // Stage every row, then one WRITE per row (after a block barrier and a system fence: the
        // copy engine / NIC reads what all threads staged).
        uint8_t* stage = c.local + g.dispatch_slot_off(bd, l, r, 0) + kHeaderBytes;  // fast: rows in order
        const uint64_t M = g.msg_bytes();
        for (int i = threadIdx.x; i < count * nvec; i += blockDim.x) {
          const int s = i / nvec, v = i - s * nvec;
          if constexpr (kCompact)
            dev::st16(c.local + stage_row_off<kCompact>(c, bd, l, r, s) + kHeaderBytes + v * 16,
                      port::load16_read_once(x + (row0 + s) * 2 * H + v * 16));
          else
            dev::st16(stage + s * M + v * 16, port::load16_read_once(x + (row0 + s) * 2 * H + v * 16));
        }
        __syncthreads();
        const uint32_t tag = proxy_tag(kTagCombine, c.buf, l, g.R);
        for (int s = threadIdx.x; s < count; s += blockDim.x) {
          port::fence_system();
          dev::push_write(c, tag, r, stage_row_off<kCompact>(c, bd, l, r, s) + kHeaderBytes,
                          g.combine_values_off(c.buf, a.src_info[row0 + s], a.src_topk[row0 + s]),
                          g.combine_slot_bytes() - kHeaderBytes, c.rank * L + l);
        }
        continue;
      }
      for (int i = threadIdx.x; i < count * nvec; i += blockDim.x) {
        const int s = i / nvec, v = i - s * nvec;
        const int t = a.src_info[row0 + s], k = a.src_topk[row0 + s];
        const uint4 val = port::load16_read_once(x + (row0 + s) * 2 * H + v * 16);
        // Layout: combine slot (buf, token t on rank r, top-k slot k) — ll/layout.h.
        dev::st16(base + g.combine_values_off(c.buf, t, k) + v * 16, val);
      }
    }
    __syncthreads();  // every row (and every WRITE push) of expert l comes before any of its flags
    if (threadIdx.x == 0) timeline::mark(c.timeline, timeline::kCombineCopy);
    // BF16 rows stored directly: a flag per row, as in send_balanced (released after the barrier
    // above, which orders the block's stores of the rows before them).
    if (!a.logfmt) flag_rows(a, l, epoch);
    for (int r = threadIdx.x; r < R; r += blockDim.x) {
      if (dev::rank_masked(c, r)) continue;
      uint8_t* base = c.peers[r];
      const uint64_t flag = g.combine_flag_off(c.buf, c.rank * L + l);
      if (base != nullptr) {
        if (!a.logfmt) continue;  // its rows carry their flags
        port::fence_system();
        // Flag after data: release at system scope covers the rows the block wrote (observed
        // through __syncthreads); the home rank reads the flag with acquire.
        port::store_release_system(reinterpret_cast<int32_t*>(base + flag), static_cast<int32_t>(epoch));
      } else if (proxy) {
        // Flag after data through the proxy: applied once the expert's `count` rows for r landed.
        // It adds 1 (a proxy counter only adds; the home rank resets it).
        const int count = static_cast<int>(static_cast<uint32_t>(a.layout_range[static_cast<int64_t>(l) * R + r]));
        dev::push_count_signal(c, proxy_tag(kTagCombine, c.buf, l, g.R), r, counter_of(flag), 1, count, c.rank * L + l);
      }
    }
  }
  __syncthreads();  // every thread has read the epoch
  if (threadIdx.x == 0) *epoch_word(c, 0) = epoch;
  timeline::mark_warp(c.timeline, timeline::kCombineFlags);
}

template <bool kCompact>
__device__ __forceinline__ void send_phase(const CombineArgs& a) {
  if (a.c.proxy.rings == nullptr && !a.logfmt)
    send_balanced(a);
  else
    send_per_expert<kCompact>(a);
}

__device__ void recv_phase(const CombineArgs& a) {
  const Common& c = a.c;
  const uint32_t epoch = *epoch_word(c, 1) + 1;
  const Layout& g = c.g;
  const int L = static_cast<int>(g.L()), K = c.num_topk;
  const int E = static_cast<int>(g.E);
  const int64_t G = g.groups();
  __shared__ const uint8_t* s_src[kMaxTopk];
  __shared__ float s_w[kMaxTopk];
  __shared__ uint32_t s_mask[kMaxTopk][kLogfmtMaskWords];  // LogFMT: the rows' headers
  __shared__ uint32_t s_valid;                             // bit k: slot k contributes
  static_assert(kMaxTopk <= 32, "a bit per top-k slot in s_valid");
  port::bf16* out = static_cast<port::bf16*>(a.out);

  for (int t = blockIdx.x; t < c.num_tokens; t += gridDim.x) {
    if (threadIdx.x == 0) s_valid = 0u;
    __syncthreads();
    if (threadIdx.x < static_cast<unsigned>(K)) {
      const int k = threadIdx.x;
      const int e = static_cast<int>(a.topk_idx[static_cast<int64_t>(t) * K + k]);
      // Loaded with the expert id, before the wait (whose acquire loads nothing may cross).
      const float w = a.topk_weights[static_cast<int64_t>(t) * K + k];
      if (e >= 0 && e < E) {
        uint64_t waited = 0;
        bool timed_out = false;
        const bool direct = dev::direct_peer(c, e / L);
        // Direct BF16: the row's own flag. Direct LogFMT: the expert's flag holds the sender's
        // epoch. Proxied: a counter the last block resets.
        const bool arrived =
            direct && !a.logfmt
                ? dev::wait_row_flag(c, g.combine_row_flag_off(c.buf, t, k), e / L, epoch, &waited, &timed_out)
                : dev::wait_signal_until(
                      c, direct, g.combine_flag_off(c.buf, e), e / L,
                      [epoch, direct](uint32_t word) { return direct ? dev::epoch_reached(word, epoch) : word != 0u; },
                      &waited, &timed_out, nullptr);
        if (timed_out) dev::report(c.err, kErrCombineRecvTimeout, c.rank, e, e / L, t);
        if (a.wait_recv_cost_stats)
          atomicAdd(reinterpret_cast<unsigned long long*>(a.wait_recv_cost_stats + e / L),
                    static_cast<unsigned long long>(waited));
        // Shrink mode: an expert of a masked owner contributes nothing (its slot holds no row).
        if (arrived || timed_out) {
          s_src[k] = c.local + g.combine_slot_off(c.buf, t, k);
          s_w[k] = w;
          atomicOr(&s_valid, 1u << k);
        }
      }
    }
    __syncthreads();  // the waiting threads' acquires cover the block's reads below
    if (threadIdx.x == 0) timeline::mark(c.timeline, timeline::kCombineWait);
    const uint32_t valid = s_valid;
    if (a.logfmt) {
      // Only bits of groups < G: a damaged header cannot move an offset outside the row.
      for (int i = threadIdx.x; i < K * kLogfmtMaskWords; i += blockDim.x) {
        const int j = i / kLogfmtMaskWords, w = i % kLogfmtMaskWords;
        if ((valid >> j) & 1u)
          s_mask[j][w] =
              dev::ld_recv(reinterpret_cast<const unsigned int*>(s_src[j]) + w, c.host_mem) & logfmt_word_bits(w, G);
      }
      __syncthreads();
    }
    if (a.logfmt) {
      reduce_token_logfmt(c, out, t, valid, s_src, s_w, s_mask);
    } else {
      reduce_token_in<false>(c, out, t, valid, s_src, s_w, s_mask);
    }
    __syncthreads();  // s_src/s_w/s_valid reuse
  }
  // The waiting threads read the epoch before a barrier of the loop above (a block without tokens
  // does not use it).
  if (threadIdx.x == 0) {
    *epoch_word(c, 1) = epoch;
    timeline::mark(c.timeline, timeline::kCombineReduce);
  }
  if (!c.all_direct && dev::last_block(&c.ws.blocks_done[0])) {
    // Proxied owners signal every rank through counters that only add: wait for the counters no
    // token waited on, then reset them all (the next writer of this half is causally after this
    // kernel). Direct flags need nothing: the next call's epoch overtakes them.
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      if (c.peers[e / L] != nullptr) continue;
      const uint64_t flag = g.combine_flag_off(c.buf, e);
      bool timed_out = false;
      dev::wait_signal(c, false, flag, e / L, nullptr, &timed_out);  // a masked owner: no wait
      if (timed_out) dev::report(c.err, kErrCombineRecvTimeout, c.rank, e, e / L, -1);
      dev::reset_signal(c, false, flag);
    }
  }
}

template <bool kCompact>
__global__ void __launch_bounds__(kBlockThreads, 1) combine_kernel(const ANYEP_GRID_CONSTANT CombineArgs a) {
  if (threadIdx.x == 0) timeline::mark(a.c.timeline, timeline::kCombineStart);
  if (a.c.phases & kPhaseSend) send_phase<kCompact>(a);
  if (a.c.phases & kPhaseRecv) recv_phase(a);
  timeline::mark_warp(a.c.timeline, timeline::kCombineEnd);
}

}  // namespace

// ll/combine_compact.cu: the compact layout's combine kernel.
cudaError_t launch_combine_compact(const CombineArgs& a, cudaStream_t stream);

}  // namespace anyep::ll
