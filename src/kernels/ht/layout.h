// anyep/src/kernels/ht/layout.h
//
// High-throughput (HT, DeepEP's "normal mode") intranode buffer layout: every offset is a formula
// shared by the host runtime, the kernels and the tests. The HT region is symmetric (every rank
// allocates the same size, peers reach it by direct stores through CUDA IPC), and separate from
// the LL region, so the two modes never share a byte and one Buffer serves both.
//
// Shape of a call: R ranks, N tokens on this rank, hidden bytes X = H * elem (BF16: 2H, FP8: H),
// S_c scales per token (FP8: H/128 float32 or packed int32; else 0), K top-k (0..kMaxTopk).
//
// Channels. A call with `num_sms` SMs runs num_sms/2 sender blocks and num_sms/2 receiver
// blocks of kBlockThreads threads; each block's W = kBlockThreads / warp size warps are split
// into P = max(1, W / R) "lanes" of R warps, so a warp owns (lane p, peer r = w % R). A channel
// is (block b, lane p): c = b * P + p, C = (num_sms/2) * P channels. Channel c owns the token range
// [c*N/C, (c+1)*N/C) of its rank: the ranges are contiguous and ascending, so the received order
// (by source rank, then token) does not depend on the SM count.
//
// Rings. For every (channel c, source s) the receiving rank holds a ring of Q slots,
// Q = max(2, num_max_nvl_chunked_recv_tokens / P) (the config's per-channel budget split over the
// lanes), written by rank s only. A ring counts with 64-bit totals that never reset: the sender's
// tail t and the receiver's head h; slot of the n-th item = n mod Q. Every call drains every ring,
// so at a call's start both sides agree on the total (h == t), without a reset that could race.
//
// Region (per rank; offsets fixed, independent of the call's shape, so totals survive a change of
// num_sms or hidden):
//
//   [0, 64)                  control: uint32 epoch (this rank's barrier generation; local)
//   barrier  [kMaxRanks] u32 at kBarrierOff + 4*s      written by rank s: its epoch at arrival
//   counts   [kMaxRanks][kCountsRow] i32 at kCountsOff: row s written by rank s in the dispatch
//            notify: [0, R) its per-rank token counts, [R, R+L) its tokens per expert of mine
//   meta     [kMaxChannels][kMaxRanks] RingMeta (32 B) at kMetaOff + 32*(c*kMaxRanks + s):
//            ring (c, s) of this rank as receiver: tail (written by s), epoch-tagged start/end
//            of the dispatch range (written by s)
//   head     [kMaxChannels][kMaxRanks] u64 at kHeadOff + 8*(c*kMaxRanks + d): this rank's ring
//            (c, me) at rank d, as sender: d's head (written by d)
//   mirror   [kMaxChannels][kMaxRanks] u64 at kMirrorOff + 8*(c*kMaxRanks + s): the head of ring
//            (c, s) as this rank last published it (local: where the next call starts)
//   rings    at kRingsOff: ring (c, s) at kRingsOff + ((c*R + s) * Q) * slot_bytes
//
// Dispatch slot (slot_bytes = align16(X + 4*S_c + 4*K + 4*K + 4)):
//   [0, X)              token payload (bf16 or e4m3)
//   [X, X+4*S_c)        scales (float32 or int32, as given)
//   then int32 [K]      top-k expert ids local to the receiver (-1: not one of its experts)
//   then float [K]      top-k weights (0 where the id is -1)
//   then int32          source token index on the sender
// Combine slot (slot_bytes = align16(2H + 4K)): bf16 [H] expert output, float [K] top-k weights.
//
// Handle (DeepEP's tuple order): rank_prefix_matrix [R,R] (inclusive prefix over source ranks of
// tokens from rank i to rank j), channel_prefix_matrix [R,C] (sender side: tokens for rank d in
// channels 0..c, inclusive), recv_channel_prefix_matrix [R,C] (receiver side: start of channel c
// inside source s's block), recv_src_idx [M], is_token_in_rank [N,R], send_head [N,R] (sender
// side: for token t and rank d, n >= 0 the position of t in ring (c(t), me) at d in this call,
// else -(n+1) where n is the position the next token for d would take).
#pragma once

#include <cstdint>

#include "common/portability.h"

namespace anyep::ht {

inline constexpr int kMaxRanks = 16;           // ranks one HT buffer reaches by direct stores
inline constexpr int kMaxLocalExperts = 1024;  // experts per rank
inline constexpr int kMaxTopk = 16;
inline constexpr int kMaxChannels = 1024;  // (num_sms/2) * lanes
inline constexpr int kBlockThreads = 512;
inline constexpr int kWarps = kBlockThreads / port::kWarpSize;
inline constexpr int kScaleGroup = 128;  // elements per FP8 scale

inline constexpr int kCountsRow = kMaxRanks + kMaxLocalExperts;
inline constexpr uint64_t kBarrierOff = 64;
inline constexpr uint64_t kCountsOff = 256;
inline constexpr uint64_t kMetaOff = kCountsOff + uint64_t{4} * kMaxRanks * kCountsRow;
inline constexpr uint64_t kHeadOff = kMetaOff + uint64_t{32} * kMaxChannels * kMaxRanks;
inline constexpr uint64_t kMirrorOff = kHeadOff + uint64_t{8} * kMaxChannels * kMaxRanks;
inline constexpr uint64_t kRingsOff = kMirrorOff + uint64_t{8} * kMaxChannels * kMaxRanks;
static_assert(kBarrierOff + 4 * kMaxRanks <= kCountsOff, "barrier words fit before the counts");
static_assert(kRingsOff % 256 == 0, "rings start aligned");

// One receiver-side ring record. The sender writes start/end, then tag (release): a reader that
// sees tag == this call's epoch sees the range. tail is the sender's 64-bit running total.
struct alignas(32) RingMeta {
  uint64_t tail;
  uint32_t tag;
  int32_t start;
  int32_t end;
  int32_t pad[3];
};
static_assert(sizeof(RingMeta) == 32, "RingMeta is 32 bytes");

ANYEP_HD ANYEP_INLINE constexpr uint64_t align16(uint64_t v) { return (v + 15) & ~uint64_t{15}; }

// The geometry of one call (all ranks compute the same from the same arguments).
struct Geometry {
  int R = 0;         // ranks
  int blocks = 0;    // sender blocks (= receiver blocks) = num_sms / 2
  int lanes = 0;     // P: channels per block
  int channels = 0;  // C = blocks * lanes
  int slots = 0;     // Q: slots per ring
  int chunk = 0;     // items a sender writes between tail updates
  uint64_t slot_bytes = 0;

  ANYEP_HD constexpr uint64_t ring_bytes() const { return uint64_t(slots) * slot_bytes; }
  // Offset of ring (c, s) in a rank's region.
  ANYEP_HD constexpr uint64_t ring_off(int c, int s) const {
    return kRingsOff + (uint64_t(c) * uint64_t(R) + uint64_t(s)) * ring_bytes();
  }
  ANYEP_HD constexpr uint64_t total_bytes() const {
    return kRingsOff + uint64_t(channels) * uint64_t(R) * ring_bytes();
  }
  // Token range [begin, end) of channel c over n tokens.
  ANYEP_HD constexpr int range_begin(int c, int n) const { return static_cast<int>((int64_t(n) * c) / channels); }
};

ANYEP_HD ANYEP_INLINE constexpr uint64_t dispatch_slot_bytes(uint64_t x_bytes, int num_scales, int topk) {
  return align16(x_bytes + 4ull * num_scales + 8ull * topk + 4);
}
ANYEP_HD ANYEP_INLINE constexpr uint64_t combine_slot_bytes(int64_t hidden, int topk) {
  return align16(2ull * hidden + 4ull * topk);
}

// Geometry for R ranks, the config's SMs and chunk sizes, and a slot size. Returns null and the
// geometry, or the reason it is unsupported (the runtime turns it into an error naming the field).
ANYEP_HD inline const char* make_geometry(int R, int num_sms, int chunk_send, int chunk_recv, uint64_t slot_bytes,
                                          Geometry* g) {
  if (R < 1 || R > kMaxRanks) return "the number of ranks is outside [1, 16] (intranode HT)";
  if (num_sms < 2 || num_sms % 2 != 0) return "Config.num_sms must be a positive even number";
  if (chunk_send < 1) return "Config.num_max_nvl_chunked_send_tokens must be >= 1";
  if (chunk_recv < 2) return "Config.num_max_nvl_chunked_recv_tokens must be >= 2";
  g->R = R;
  g->blocks = num_sms / 2;
  g->lanes = kWarps / R > 0 ? kWarps / R : 1;
  if (kWarps < R) return "more ranks than warps per block";
  g->channels = g->blocks * g->lanes;
  if (g->channels > kMaxChannels) return "Config.num_sms gives more than 1024 channels";
  g->slots = chunk_recv / g->lanes >= 2 ? chunk_recv / g->lanes : 2;
  // A sender publishes at most half a ring at a time, so a receiver always has a chunk to take.
  g->chunk = chunk_send < g->slots / 2 ? chunk_send : (g->slots / 2 > 0 ? g->slots / 2 : 1);
  g->slot_bytes = slot_bytes;
  return nullptr;
}

}  // namespace anyep::ht
