// anyep/src/kernels/ll_layout.h
//
// Low-latency (LL) buffer layout: every offset is a formula of the shape, shared by the host
// runtime, the kernels and the tests. The buffer is symmetric: every rank allocates the same
// size and uses the same offsets, so a sender computes a peer's address as peer_base + offset
// with no round trip before the data.
//
// Shape: T = max tokens per rank (num_max_dispatch_tokens_per_rank), H = hidden (multiple of 128),
// R = ranks, E = experts (multiple of R), L = E / R local experts, K = top-k (<= kMaxTopk).
//
// Message (dispatch): one per (token, destination expert), stride M = align16(16 + 2H) bytes:
//
//   bytes [0, 16)        header: int32 src_token (index on the source rank, 0..T-1)
//                                int32 topk_slot (k: which of the token's top-k entries)
//                                int32 reserved[2]
//   BF16:  [16, 16+2H)   payload, H bf16
//   FP8:   [16, 16+H)    payload, H e4m3
//          [16+H, 16+H+4H/128)  H/128 float32 scales (dequant: x = fp8 * scale); with UE8M0
//                        the scale is a power of two and the receiver packs its exponent byte.
//   The stride is the BF16 size for both formats, so one buffer serves either per call.
//
// Buffer (two halves b in {0,1} for double buffering; dispatch and combine toggle separately):
//
//   signals (offset 0, size S = 2 * 2 * kMaxExperts * 4 = 64 KiB, fixed): the area and every signal's
//   position do not depend on the shape, so a call with another shape (other E, T or H) never reads
//   a stale payload byte of an earlier shape as a signal (signals are reset by their readers; the
//   payload regions are not).
//     dispatch_count[b][l][r] int32 at 4 * (b*X + l*R + r)          (X = kMaxExperts, r = source rank)
//         written by source rank r after its tokens for local expert l: value = count + 1
//         (0 = not yet arrived); the receiver resets it to 0 after reading.
//     combine_flag[b][e] int32 at 4 * (2*X + b*X + e)                (e = global expert)
//         written by the rank that owns expert e after all its outputs for this home rank:
//         value 1; the home rank resets it after reading.
//   dispatch region (offset S, size D = 2 * E * T * M):
//     slot (b, l, r, s) at S + ((b*L + l)*R + r) * T * M + s * M     (s < T: arrival slot)
//         one private region per (local expert l, source rank r): no two senders share a byte.
//   combine region (offset S + D, size C = 2 * T * kMaxTopk * 2H):
//     slot (b, t, k) at S + D + ((b*T + t)*kMaxTopk + k) * 2H        (t: token on the home rank)
//         one private slot per (home token, top-k entry): the expert's BF16 output lands there
//         and the home rank sums the K slots of a token, weighted, in FP32.
//   dispatch send staging (offset S + D + C, size P = 2 * T * kMaxTopk * M): proxy path only.
//     slot (b, t, k) at S + D + C + ((b*T + t)*kMaxTopk + k) * M
//         a message for a peer without direct stores is built here (header with its own top-k
//         slot k) and a proxy WRITE copies it to the owner's dispatch slot. Combine needs no
//         staging area of its own: the row (l, r, s) it returns is staged in the dispatch slot
//         (b_d, l, r, s) it arrived in (already copied out by the dispatch receive phase, and not
//         rewritten before rank r has received this combine).
//
// Proxy signals (peers without direct stores): the SIGNAL of a count or flag adds to a 64-bit
// counter in pinned host memory instead; counter index = the signal's offset / 4 above, so both
// paths share one numbering (kNumCounters in all). Fence groups (proxy tags) per (kind, half,
// local expert): tag = (kind * 2 + b) * max_local + l, max_local = ceil(kMaxExperts / R).
//
// Handle storage (int32, one allocation per dispatch: written by the dispatch, read by the combine
// of that dispatch), with P = L * R * T (one entry per received row (l, row), row < R*T):
//
//   [0, P)                  src_info plane: source token of row (l, row) on its source rank; this
//                           plane, viewed [L, R*T], is the handle tensor DeepEP's API returns
//   [P, 2P)                 src_topk plane: the top-k slot k of that row (combine writes the row
//                           to the home slot (t, k))
//   [2P, 2P + kHandleTail)  tail: [0] = the buffer half the dispatch used (combine stages rows for
//                           proxied peers in that half's dispatch slots); [1, kHandleTail) reserved
//
// Only the runtime (src/runtime) and the kernels read this layout; callers allocate handle_ints().
//
// Footprint at T=128, H=7168, R=2, E=288: M = 14352, D = 1,058,144,256, C = 58,720,256,
// P = 58,785,792, S = 65,536, total 1,175,715,840 bytes (DeepEP: 2.15 GB). The O(R x T x M) layout
// (route in the header, one message per destination rank) is the next step (docs/ll.md).
#pragma once

#include <cstdint>

#include "common/portability.h"

namespace anyep::ll {

inline constexpr int kMaxTopk = 16;
inline constexpr int kScaleGroup = 128;  // elements per FP8 scale
inline constexpr int kUe8m0Pack = 4;     // UE8M0 exponents per int32
inline constexpr int kMaxHidden = 16384;
inline constexpr int kHeaderBytes = 16;
inline constexpr int kSignalAlign = 256;
inline constexpr int64_t kMaxExperts = 4096;              // signal area and scratch counters are sized for this
inline constexpr int64_t kNumCounters = 4 * kMaxExperts;  // proxy signal counters (= signal slots)
inline constexpr int64_t kHandleTail = 4;                 // int32 words after the two planes of a handle (see above)

// Proxy fence-group kinds (see the tag formula above).
enum TagKind : int { kTagDispatch = 0, kTagCombine = 1 };
ANYEP_HD ANYEP_INLINE constexpr int64_t max_local_experts(int64_t R) { return (kMaxExperts + R - 1) / R; }
ANYEP_HD ANYEP_INLINE constexpr int64_t num_proxy_tags(int64_t R) { return 4 * max_local_experts(R); }
ANYEP_HD ANYEP_INLINE constexpr uint32_t proxy_tag(int kind, int b, int64_t l, int64_t R) {
  return static_cast<uint32_t>((kind * 2 + b) * max_local_experts(R) + l);
}
// Counter a proxy SIGNAL targets for the signal at byte offset `signal_off` of the signal area.
ANYEP_HD ANYEP_INLINE constexpr uint32_t counter_of(uint64_t signal_off) {
  return static_cast<uint32_t>(signal_off / 4);
}

struct MsgHeader {
  int32_t src_token;
  int32_t topk_slot;
  int32_t reserved[2];
};
static_assert(sizeof(MsgHeader) == kHeaderBytes, "LL message header is 16 bytes");

ANYEP_HD ANYEP_INLINE constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

struct Layout {
  int64_t T = 0, H = 0, R = 0, E = 0;

  ANYEP_HD ANYEP_INLINE constexpr int64_t L() const { return E / R; }
  // Message stride (both formats).
  ANYEP_HD ANYEP_INLINE constexpr uint64_t msg_bytes() const {
    return align_up(kHeaderBytes + 2 * static_cast<uint64_t>(H), 16);
  }
  // FP8 payload sits right after the header; its scales right after the payload.
  ANYEP_HD ANYEP_INLINE constexpr uint64_t fp8_scale_offset() const { return kHeaderBytes + static_cast<uint64_t>(H); }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t signal_bytes() const {
    return align_up(2ull * 2ull * static_cast<uint64_t>(kMaxExperts) * 4ull, kSignalAlign);
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t dispatch_half_bytes() const {
    return static_cast<uint64_t>(E) * static_cast<uint64_t>(T) * msg_bytes();
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t combine_slot_bytes() const { return 2ull * static_cast<uint64_t>(H); }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t combine_half_bytes() const {
    return static_cast<uint64_t>(T) * kMaxTopk * combine_slot_bytes();
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t stage_half_bytes() const {
    return static_cast<uint64_t>(T) * kMaxTopk * msg_bytes();
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t total_bytes() const {
    return signal_bytes() + 2 * dispatch_half_bytes() + 2 * combine_half_bytes() + 2 * stage_half_bytes();
  }
  // Bytes of a dispatch message a proxy WRITE carries (header + payload [+ scales]), 16-aligned.
  ANYEP_HD ANYEP_INLINE constexpr uint64_t msg_used_bytes(bool bf16) const {
    return bf16 ? msg_bytes() : align_up(fp8_scale_offset() + 4ull * static_cast<uint64_t>(H / kScaleGroup), 16);
  }

  // ---- handle storage (int32 words; see the layout comment above) ----
  ANYEP_HD ANYEP_INLINE constexpr int64_t handle_plane_ints() const { return L() * R * T; }
  ANYEP_HD ANYEP_INLINE constexpr int64_t handle_src_info_off() const { return 0; }
  ANYEP_HD ANYEP_INLINE constexpr int64_t handle_src_topk_off() const { return handle_plane_ints(); }
  ANYEP_HD ANYEP_INLINE constexpr int64_t handle_half_off() const { return 2 * handle_plane_ints(); }
  ANYEP_HD ANYEP_INLINE constexpr int64_t handle_ints() const { return 2 * handle_plane_ints() + kHandleTail; }

  // ---- offsets (see the layout comment above) ----
  ANYEP_HD ANYEP_INLINE constexpr uint64_t dispatch_count_off(int b, int64_t l, int64_t r) const {
    return 4ull * static_cast<uint64_t>(b * kMaxExperts + l * R + r);
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t combine_flag_off(int b, int64_t e) const {
    return 4ull * static_cast<uint64_t>(2 * kMaxExperts + b * kMaxExperts + e);
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t dispatch_slot_off(int b, int64_t l, int64_t r, int64_t s) const {
    return signal_bytes() + static_cast<uint64_t>((b * L() + l) * R + r) * static_cast<uint64_t>(T) * msg_bytes() +
           static_cast<uint64_t>(s) * msg_bytes();
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t combine_slot_off(int b, int64_t t, int64_t k) const {
    return signal_bytes() + 2 * dispatch_half_bytes() +
           static_cast<uint64_t>((b * T + t) * kMaxTopk + k) * combine_slot_bytes();
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t stage_slot_off(int b, int64_t t, int64_t k) const {
    return signal_bytes() + 2 * dispatch_half_bytes() + 2 * combine_half_bytes() +
           static_cast<uint64_t>((b * T + t) * kMaxTopk + k) * msg_bytes();
  }
};

// Reason a shape cannot be served; nullptr when it can. Host and tests share the checks.
ANYEP_HD inline const char* layout_unsupported(const Layout& g) {
  if (g.T <= 0) return "num_max_dispatch_tokens_per_rank must be positive";
  if (g.R <= 0) return "num_ranks must be positive";
  if (g.E <= 0 || g.E % g.R != 0) return "num_experts must be a positive multiple of num_ranks";
  if (g.E > kMaxExperts) return "num_experts exceeds 4096 (ll::kMaxExperts)";
  if (g.H <= 0 || g.H % kScaleGroup != 0 || g.H > kMaxHidden) return "hidden must be a multiple of 128 in [128, 16384]";
  return nullptr;
}

}  // namespace anyep::ll
