// anyep/src/kernels/ll/layout.h
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
//   signals (offset 0, size S = 5 * kMaxExperts * 4 = 80 KiB, fixed): the area and every signal's
//   position do not depend on the shape, so a call with another shape (other E, T or H) never reads
//   a stale payload byte of an earlier shape as a signal (clean zeroes the signals but the barrier
//   words, and the regions after them: the row flags of combine slots start again with the epochs).
//     dispatch_count[b][l][r] int32 at 4 * (b*X + l*R + r)          (X = kMaxExperts, r = source rank)
//         written by source rank r after its tokens for local expert l: value = count + 1
//         (0 = not yet arrived); the receiver resets it to 0 after reading.
//     combine_flag[b][e] int32 at 4 * (2*X + b*X + e)                (e = global expert)
//         LogFMT rows, and owners behind the proxy: written by the rank that owns expert e after
//         all its outputs for this home rank: value = the call's number on half b (its epoch,
//         ll::Workspace::combine_epoch); never reset: the home rank waits until it has reached its
//         own number for the call. (Through the proxy: a counter, below.) BF16 rows stored
//         directly carry their own flag instead (the combine slot's header, below).
//     barrier[r] int32 at 4 * (4*X + r)                               (r = the arriving rank, r < X)
//         the elastic barrier of clean (shrink mode): how many barriers rank r has arrived at
//         here; never reset (clean resets only the 4*X words above), readers keep their own count.
//   dispatch region (offset S), in one of two layouts (Layout::compact; ANYEP_LL_LAYOUT):
//   fast (default; size D = 2 * E * T * M):
//     slot (b, l, r, s) at S + (b*E + l*R + r) * T * M + s * M        (s < T: row s of (l, r))
//         one private region per (local expert l, source rank r): no two senders share a byte.
//   compact (size D = 2 * R * T * C * M), C = min(kMaxTopk, L) message slots per (source rank,
//   token): a token has at most C top-k entries on one rank:
//     message (b, r, m) at S + ((b*R + r) * T*C + m) * M             (m = t*C + k': token t of
//         source r, k' = how many of t's top-k entries before this one go to the same rank)
//         one private region per source rank: no two senders share a byte. A receiver finds the
//         rows of (local expert l, source r) through the route lists below (one more load per
//         row than the fast layout: 2026-11-24, dispatch 17.1 -> 20.2 us at one rank, docs/bench/ll.md).
//   combine region (offset S + D, size C = 2 * T * kMaxTopk * W, slot stride W = 16 + 2H):
//     slot (b, t, k) at S + D + ((b*T + t)*kMaxTopk + k) * W         (t: token on the home rank)
//         one private slot per (home token, top-k entry): the expert's output row lands there
//         and the home rank sums the K slots of a token, weighted, in FP32. A row is
//           BF16:    bytes [16, 16+2H) the H values; from a direct owner, the header's first 8
//                    bytes then hold the row's flag (combine_row_flag(epoch), stored after the
//                    values with release: the home rank waits per row, not per expert; clean
//                    zeroes the buffer, so no flag outlives the reset of the epochs); through the
//                    proxy the header is not written;
//           LogFMT:  (use_logfmt; group encoding in logfmt.h) G = H/128 groups:
//             [0, 16)  header: encode mask, 4 uint32, bit g%32 of word g/32 = group g encoded
//             group g at 16 + 256g - 96 * n_g   (n_g: encoded groups before g; an encoded group
//                      takes 160 bytes, a BF16 group 256, so the groups stay 16-byte aligned)
//             then the meta words (logfmt.h) of the encoded groups, in group order: group g's at
//                      16 + 2H - 96 * n + 4 * n_g   (n: encoded groups in the row)
//             bytes used 16 + 2H - 92 * n <= W: a row fits its slot whatever is encoded, and
//             the proxy WRITE moves align16(16 + 2H - 92 * n) bytes, not W.
//   dispatch send staging (offset S + D + C, size P = 2 * T * kMaxTopk * M): proxy path only.
//     slot (b, t, k) at S + D + C + ((b*T + t)*kMaxTopk + k) * M
//         a message for a peer without direct stores is built here (header with its own top-k
//         slot k) and a proxy WRITE copies it to the owner's dispatch slot. Combine needs no
//         staging area of its own: the row (l, r, s) it returns is staged in the slot it arrived
//         in (fast: (b_d, l, r, s); compact: message (b_d, r, route(b_d, l, r, s))), already
//         copied out by the dispatch receive phase and not rewritten before rank r has received
//         this combine, laid out as its combine slot (a message slot, M = align16(16 + 2H) bytes,
//         holds a combine row of W = 16 + 2H bytes).
//   compact layout only (Q = 0 in the fast one):
//   route lists (offset S + D + C + P, size Q = 2 * E * Tp * 4, Tp = align4(T)): int32
//     route(b, l, r, s) at S + D + C + P + 4 * (((b*L + l)*R + r) * Tp + s)
//         the message m holding row s of (local expert l, source r): written by the sender with
//         the message (direct: a 4-byte store next to it; proxy: one WRITE of the whole list
//         before the count), read up to the count. Rows s of (l, r) are numbered by the sender.
//   route staging (offset S + D + C + P + Q, size Q): proxy path only.
//     route_stage(b, e, s) at S + D + C + P + Q + 4 * ((b*E + e) * Tp + s)
//         the sender's list for expert e (global), copied by one WRITE to route(b, e % L, me, 0).
//
// Proxy signals (peers without direct stores): the SIGNAL of a count or flag adds to a 64-bit
// counter in pinned host memory instead; counter index = the signal's offset / 4 above, so both
// paths share one numbering (kNumCounters in all; clean resets the first kNumResetCounters). A
// combine flag's SIGNAL adds 1, and the home rank resets the counter after the call. A
// barrier arrival through the proxy adds 1 to the counter of barrier[r] (no fence: applied on
// arrival). Fence groups (proxy tags) per (kind, half,
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
// Footprint at T=128, H=7168, R=2, E=288: M = 14352, C = 58,785,792, P = 58,785,792, S = 81,920;
// fast: D = 1,058,144,256, total 1,175,797,760 bytes; compact (C = 16): D = 117,571,584,
// Q = 294,912, total 235,814,912 bytes (DeepEP: 2.15 GB). One message per (token, destination
// rank) instead of per top-k entry would cut the compact D by C (docs/ll.md).
#pragma once

#include <cstdint>

#include "common/portability.h"
#include "kernels/common/proxy_path.h"
#include "kernels/ll/logfmt.h"

namespace anyep::ll {

inline constexpr int kMaxTopk = 16;
inline constexpr int kScaleGroup = 128;  // elements per FP8 scale
inline constexpr int kUe8m0Pack = 4;     // UE8M0 exponents per int32
inline constexpr int kMaxHidden = 16384;
inline constexpr int kHeaderBytes = 16;
inline constexpr int kSignalAlign = 256;
// The signal area and scratch counters are sized for kMaxExperts; the proxy counters and fence
// groups are numbered by kernels/common/proxy_path.h, shared with HT's rail exchange.
using anyep::counter_of;
using anyep::kMaxExperts;
using anyep::kNumCounters;
using anyep::kNumResetCounters;
using anyep::max_local_experts;
using anyep::num_proxy_tags;
inline constexpr int64_t kHandleTail = 4;  // int32 words after the two planes of a handle (see above)

// Proxy fence-group kinds (see the tag formula above).
enum TagKind : int { kTagDispatch = 0, kTagCombine = 1 };
ANYEP_HD ANYEP_INLINE constexpr uint32_t proxy_tag(int kind, int b, int64_t l, int64_t R) {
  return static_cast<uint32_t>((kind * 2 + b) * max_local_experts(R) + l);
}

struct MsgHeader {
  int32_t src_token;
  int32_t topk_slot;
  int32_t reserved[2];
};
static_assert(sizeof(MsgHeader) == kHeaderBytes, "LL message header is 16 bytes");

ANYEP_HD ANYEP_INLINE constexpr uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// LogFMT combine rows (see the layout comment): the header is the encode mask, one bit per group.
// The flag a direct owner stores in a BF16 row's header after the row (combine slot, above): the
// call's number on its half (its epoch) in the low word and a check word in the high one. The home
// rank waits for exactly this value: a stale flag holds an earlier call's number, and bytes of an
// earlier shape's rows at this offset would have to match the 64 bits of this call.
inline constexpr uint32_t kRowFlagCheck = 0x9e3779b9u;
ANYEP_HD ANYEP_INLINE constexpr uint64_t combine_row_flag(uint32_t epoch) {
  return (static_cast<uint64_t>(~epoch ^ kRowFlagCheck) << 32) | epoch;
}
inline constexpr int kMaskWordBits = 32;
inline constexpr int kLogfmtMaskWords = kHeaderBytes / 4;
inline constexpr int kMaxGroups = kMaxHidden / logfmt::kGroup;
inline constexpr uint64_t kLogfmtGroupSaving = logfmt::kRawBytes - logfmt::kEncodedBytes;  // 96
static_assert(logfmt::kGroup == kScaleGroup, "LogFMT groups are the FP8 scale groups (hidden % 128 == 0)");
static_assert(kLogfmtMaskWords * kMaskWordBits >= kMaxGroups, "the row header has a bit for every group");
static_assert(kLogfmtGroupSaving % 16 == 0, "groups after an encoded one stay 16-byte aligned");

// Encoded groups before group g, and in all, of a row's mask (bits of groups >= G must be clear).
ANYEP_HD ANYEP_INLINE int logfmt_before(const uint32_t mask[kLogfmtMaskWords], int g) {
  int n = 0;
  for (int w = 0; w < g / kMaskWordBits; ++w) n += port::popcount64(mask[w]);
  const int bit = g % kMaskWordBits;
  return bit == 0 ? n : n + port::popcount64(mask[g / kMaskWordBits] & ((1u << bit) - 1u));
}
ANYEP_HD ANYEP_INLINE int logfmt_total(const uint32_t mask[kLogfmtMaskWords]) {
  int n = 0;
  for (int w = 0; w < kLogfmtMaskWords; ++w) n += port::popcount64(mask[w]);
  return n;
}
// The bits of mask word w that name groups of a row of G groups (a receiver masks what it reads,
// so that no mask, however damaged, puts an offset outside the row).
ANYEP_HD ANYEP_INLINE constexpr uint32_t logfmt_word_bits(int w, int64_t G) {
  return G >= (w + 1) * kMaskWordBits ? ~0u : G <= w * kMaskWordBits ? 0u : (1u << (G - w * kMaskWordBits)) - 1u;
}

struct Layout {
  int64_t T = 0, H = 0, R = 0, E = 0;
  bool compact = false;  // dispatch region layout (see above): fast (E x T slots) or compact

  ANYEP_HD ANYEP_INLINE constexpr int64_t L() const { return E / R; }
  // Message stride (both formats).
  ANYEP_HD ANYEP_INLINE constexpr uint64_t msg_bytes() const {
    return align_up(kHeaderBytes + 2 * static_cast<uint64_t>(H), 16);
  }
  // FP8 payload sits right after the header; its scales right after the payload.
  ANYEP_HD ANYEP_INLINE constexpr uint64_t fp8_scale_offset() const { return kHeaderBytes + static_cast<uint64_t>(H); }
  ANYEP_HD ANYEP_INLINE static constexpr uint64_t signal_bytes() {
    return align_up(static_cast<uint64_t>(kNumCounters) * 4ull, kSignalAlign);
  }
  // The part of the signal area clean resets (everything but the barrier words).
  ANYEP_HD ANYEP_INLINE static constexpr uint64_t reset_signal_bytes() {
    return static_cast<uint64_t>(kNumResetCounters) * 4ull;
  }
  // Message slots per (source rank, token): at most this many top-k entries of a token go to one rank.
  ANYEP_HD ANYEP_INLINE constexpr int64_t slots_per_token() const { return L() < kMaxTopk ? L() : kMaxTopk; }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t dispatch_half_bytes() const {
    return (compact ? static_cast<uint64_t>(R) * static_cast<uint64_t>(slots_per_token()) : static_cast<uint64_t>(E)) *
           static_cast<uint64_t>(T) * msg_bytes();
  }
  // Route lists: T rounded up to 4 entries so that every list starts 16-byte aligned (WRITE offsets).
  ANYEP_HD ANYEP_INLINE constexpr int64_t route_stride() const { return (T + 3) / 4 * 4; }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t route_half_bytes() const {
    return compact ? 4ull * static_cast<uint64_t>(E) * static_cast<uint64_t>(route_stride()) : 0ull;
  }
  // Combine slot: the row header, then the row (BF16 or LogFMT, see the layout comment).
  ANYEP_HD ANYEP_INLINE constexpr uint64_t combine_slot_bytes() const {
    return kHeaderBytes + 2ull * static_cast<uint64_t>(H);
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t combine_half_bytes() const {
    return static_cast<uint64_t>(T) * kMaxTopk * combine_slot_bytes();
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t stage_half_bytes() const {
    return static_cast<uint64_t>(T) * kMaxTopk * msg_bytes();
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t total_bytes() const { return route_stage_base() + 2 * route_half_bytes(); }
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
  // A (local expert l, source rank r) pair is also numbered as one index p = l * R + r (p < E):
  // the dispatch receive's offsets by p need neither l nor r, so no division before its loads.
  ANYEP_HD ANYEP_INLINE constexpr uint64_t dispatch_count_off(int b, int64_t l, int64_t r) const {
    return dispatch_count_off_at(b, l * R + r);
  }
  ANYEP_HD ANYEP_INLINE static constexpr uint64_t dispatch_count_off_at(int b, int64_t p) {
    return 4ull * static_cast<uint64_t>(b * kMaxExperts + p);
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t combine_flag_off(int b, int64_t e) const {
    return 4ull * static_cast<uint64_t>(2 * kMaxExperts + b * kMaxExperts + e);
  }
  // Needs no shape: the barrier runs between shapes.
  ANYEP_HD ANYEP_INLINE static constexpr uint64_t barrier_off(int64_t r) {
    return 4ull * static_cast<uint64_t>(kNumResetCounters + r);
  }
  // Fast layout: row s of (local expert l, source rank r) in half b.
  ANYEP_HD ANYEP_INLINE constexpr uint64_t dispatch_slot_off(int b, int64_t l, int64_t r, int64_t s) const {
    return dispatch_region_off(b, l * R + r) + static_cast<uint64_t>(s) * msg_bytes();
  }
  // Slot 0 of pair p's region: (b*L + l)*R + r = b*E + p, as E = L*R (validated).
  ANYEP_HD ANYEP_INLINE constexpr uint64_t dispatch_region_off(int b, int64_t p) const {
    return signal_bytes() + static_cast<uint64_t>(b * E + p) * static_cast<uint64_t>(T) * msg_bytes();
  }
  // Compact layout: message m (= t * slots_per_token() + k') from source rank r in half b.
  ANYEP_HD ANYEP_INLINE constexpr uint64_t dispatch_msg_off(int b, int64_t r, int64_t m) const {
    return signal_bytes() + static_cast<uint64_t>((b * R + r) * T * slots_per_token() + m) * msg_bytes();
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t route_base() const {
    return signal_bytes() + 2 * dispatch_half_bytes() + 2 * combine_half_bytes() + 2 * stage_half_bytes();
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t route_stage_base() const { return route_base() + 2 * route_half_bytes(); }
  // Entry s of the route list of (local expert l, source rank r), half b.
  ANYEP_HD ANYEP_INLINE constexpr uint64_t route_off(int b, int64_t l, int64_t r, int64_t s) const {
    return route_base() + 4ull * static_cast<uint64_t>(((b * L() + l) * R + r) * route_stride() + s);
  }
  // Entry s of the sender's staged route list for global expert e, half b (proxy path).
  ANYEP_HD ANYEP_INLINE constexpr uint64_t route_stage_off(int b, int64_t e, int64_t s) const {
    return route_stage_base() + 4ull * static_cast<uint64_t>((b * E + e) * route_stride() + s);
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t combine_slot_off(int b, int64_t t, int64_t k) const {
    return signal_bytes() + 2 * dispatch_half_bytes() +
           static_cast<uint64_t>((b * T + t) * kMaxTopk + k) * combine_slot_bytes();
  }
  // A BF16 row's flag in slot (b, t, k): the first 8 bytes of its header (combine_row_flag).
  ANYEP_HD ANYEP_INLINE constexpr uint64_t combine_row_flag_off(int b, int64_t t, int64_t k) const {
    return combine_slot_off(b, t, k);
  }
  // A BF16 row's values in slot (b, t, k).
  ANYEP_HD ANYEP_INLINE constexpr uint64_t combine_values_off(int b, int64_t t, int64_t k) const {
    return combine_slot_off(b, t, k) + kHeaderBytes;
  }
  // LogFMT row, offsets from the row's start: group g (n_before encoded groups before it), the meta
  // word of an encoded group, and the bytes a row with n encoded groups uses (16-byte multiple).
  ANYEP_HD ANYEP_INLINE static constexpr uint64_t logfmt_group_off(int64_t g, int n_before) {
    return kHeaderBytes + static_cast<uint64_t>(g) * logfmt::kRawBytes -
           static_cast<uint64_t>(n_before) * kLogfmtGroupSaving;
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t logfmt_meta_off(int n, int n_before) const {
    return kHeaderBytes + 2ull * static_cast<uint64_t>(H) - static_cast<uint64_t>(n) * kLogfmtGroupSaving +
           static_cast<uint64_t>(n_before) * logfmt::kMetaBytes;
  }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t logfmt_row_bytes(int n) const { return align_up(logfmt_meta_off(n, n), 16); }
  ANYEP_HD ANYEP_INLINE constexpr int64_t groups() const { return H / logfmt::kGroup; }
  ANYEP_HD ANYEP_INLINE constexpr uint64_t stage_slot_off(int b, int64_t t, int64_t k) const {
    return signal_bytes() + 2 * dispatch_half_bytes() + 2 * combine_half_bytes() +
           static_cast<uint64_t>((b * T + t) * kMaxTopk + k) * msg_bytes();
  }
};

// The slot k' (message m = t * slots_per_token() + k') of top-k entry k of a token, from the
// token's topk_idx row: how many valid entries before k go to the same rank as entry k (a valid
// expert). Below slots_per_token() when the row's experts are distinct; the sender checks.
ANYEP_HD ANYEP_INLINE int msg_slot_in_token(const int64_t* topk_row, int k, int64_t L, int64_t E) {
  const int64_t owner = topk_row[k] / L;
  int n = 0;
  for (int j = 0; j < k; ++j) n += (topk_row[j] >= 0 && topk_row[j] < E && topk_row[j] / L == owner);
  return n;
}

// Combine send, balanced over blocks (ll/combine_impl.cuh): the rows of all (local expert l, rank
// r) pairs, p = l * R + r, are numbered pair by pair (first[p] = rows of the pairs before p,
// first[P] = all rows), and block b of `blocks` copies rows [share_begin(b), share_begin(b + 1)).
ANYEP_HD ANYEP_INLINE int share_begin(int64_t total_rows, int b, int blocks) {
  return static_cast<int>(total_rows * b / blocks);
}
// The pair holding row i (0 <= i < first[P]): the last p with first[p] <= i, which skips the
// pairs without rows (their first equals the next pair's).
ANYEP_HD ANYEP_INLINE int pair_of_row(const int* first, int P, int i) {
  int lo = 0, hi = P - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first[mid] <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

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
