// anyep/src/channel/transfer_cmd.h
//
// TransferCmd: the 16-byte command a GPU kernel (or a CPU producer) writes into a channel ring for
// a proxy thread to execute. This header is shared by host code, CUDA kernels and tests.
//
// Wire layout (two little-endian 64-bit words; `lo` is published last / atomically with `hi`):
//
//   lo  bits  0.. 3  op         4 bits   Op below; 0 (kEmpty) marks an unpublished slot
//       bits  4.. 7  flags      4 bits   op-specific flags
//       bits  8..23  dst_rank  16 bits   destination rank, 0..65535 (>= 1024 ranks)
//       bits 24..47  length    24 bits   WRITE: bytes, 0..16 MiB-1
//                    counter   24 bits   SIGNAL: counter index on the destination, 0..16M-1
//       bits 48..63  tag       16 bits   fence group at the receiver (LL: local expert,
//                                         HT: channel); WRITE+kSignal adds 1 to counter[tag]
//   hi  WRITE:   bits  0..31 src_offset (16-byte units: reach 64 GiB)
//                bits 32..63 dst_offset (16-byte units: reach 64 GiB)
//       SIGNAL:  bits  0..31 value      (signed 32-bit add)
//                bits 32..63 fence_count (kFenceCount: tagged writes that must land first)
//       QUIET:   all 64 bits ring_mask  (0: this ring only; else bit i = ring i of the proxy)
//       BARRIER: all 64 bits epoch      (barrier generation, to catch mismatched barriers)
//
// Offsets are into the symmetric buffer every rank registered at start-up; the proxy translates
// and bounds-checks them. Encoding a value that does not fit is an error: on the host it throws
// anyep::InvalidArgument naming the field, on the device it prints the field and traps.
#pragma once

#include <cstdint>

#include "common/portability.h"

#if !defined(ANYEP_DEVICE_PASS)
#include "common/error.h"
#endif

namespace anyep::channel {

enum class Op : uint8_t {
  kEmpty = 0,    // never published: a zero `lo` word means "slot not written yet"
  kNop = 1,      // consumed and retired, nothing posted (tests, padding)
  kWrite = 2,    // one-sided write src_offset -> (dst_rank, dst_offset), optional +1 signal
  kSignal = 3,   // add `value` to counter `counter` on dst_rank (remote atomic or emulated)
  kQuiet = 4,    // retire only when every earlier command of the named rings is remotely complete
  kBarrier = 5,  // retire only when every rank (or the same-rail subset) entered this barrier
};
inline constexpr int kNumOps = 6;

namespace cmd {
// Field widths: the single source of truth for encode, decode, tests and docs.
inline constexpr int kOpBits = 4;
inline constexpr int kFlagBits = 4;
inline constexpr int kDstRankBits = 16;
inline constexpr int kLengthBits = 24;
inline constexpr int kCounterBits = 24;  // shares the length field (SIGNAL)
inline constexpr int kTagBits = 16;
inline constexpr int kOffsetBits = 32;
inline constexpr int kOffsetShift = 4;  // offsets are encoded in 16-byte units

inline constexpr int kOpShift = 0;
inline constexpr int kFlagShift = kOpShift + kOpBits;
inline constexpr int kDstRankShift = kFlagShift + kFlagBits;
inline constexpr int kLengthShift = kDstRankShift + kDstRankBits;
inline constexpr int kTagShift = kLengthShift + kLengthBits;
static_assert(kTagShift + kTagBits == 64, "lo word must be exactly 64 bits");
static_assert(kLengthBits == kCounterBits, "counter shares the length field");
static_assert(2 * kOffsetBits == 64, "hi word holds two offsets");

ANYEP_HD inline constexpr uint64_t mask(int bits) { return bits >= 64 ? ~0ull : ((1ull << bits) - 1); }

inline constexpr uint32_t kMaxDstRank = static_cast<uint32_t>(mask(kDstRankBits));  // 65535
inline constexpr uint32_t kMaxLength = static_cast<uint32_t>(mask(kLengthBits));    // 16 MiB - 1
inline constexpr uint32_t kMaxCounter = static_cast<uint32_t>(mask(kCounterBits));
inline constexpr uint32_t kMaxTag = static_cast<uint32_t>(mask(kTagBits));
inline constexpr uint64_t kOffsetAlign = 1ull << kOffsetShift;             // 16 bytes
inline constexpr uint64_t kMaxOffset = mask(kOffsetBits) << kOffsetShift;  // 64 GiB - 16
static_assert(kMaxDstRank + 1 >= 1024, "must address >= 1024 ranks");
static_assert(kMaxOffset + kOffsetAlign == (64ull << 30), "offset reach is 64 GiB");

// Flags.
inline constexpr uint8_t kWriteSignal = 1u << 0;    // WRITE: counter[tag] += 1 once data landed
inline constexpr uint8_t kFenceCount = 1u << 0;     // SIGNAL: LL partial completion fence
inline constexpr uint8_t kFenceOrdered = 1u << 1;   // SIGNAL: HT partial order (per channel=tag)
inline constexpr uint8_t kBarrierRail = 1u << 0;    // BARRIER: same-rail subset instead of all
inline constexpr uint32_t kAllPeers = kMaxDstRank;  // QUIET dst_rank: every peer
}  // namespace cmd

struct alignas(16) TransferCmd {
  uint64_t lo = 0;
  uint64_t hi = 0;
};
static_assert(sizeof(TransferCmd) == 16, "TransferCmd is exactly 16 bytes on the wire");
static_assert(alignof(TransferCmd) == 16, "16-byte alignment: one vector store publishes a slot");

// Which field failed to encode (kNone when all fit).
enum class CmdField : uint8_t {
  kNone,
  kOp,
  kFlags,
  kDstRank,
  kLength,
  kCounter,
  kTag,
  kSrcOffset,
  kDstOffset,
  kOffsetAlignment
};

ANYEP_HD ANYEP_INLINE const char* cmd_field_name(CmdField f) {
  switch (f) {
    case CmdField::kNone:
      return "none";
    case CmdField::kOp:
      return "op";
    case CmdField::kFlags:
      return "flags";
    case CmdField::kDstRank:
      return "dst_rank";
    case CmdField::kLength:
      return "length";
    case CmdField::kCounter:
      return "counter";
    case CmdField::kTag:
      return "tag";
    case CmdField::kSrcOffset:
      return "src_offset";
    case CmdField::kDstOffset:
      return "dst_offset";
    case CmdField::kOffsetAlignment:
      return "offset alignment (16 bytes)";
  }
  return "?";
}

// Raw, unchecked field access (decode side).
ANYEP_HD ANYEP_INLINE Op cmd_op(const TransferCmd& c) {
  return static_cast<Op>((c.lo >> cmd::kOpShift) & cmd::mask(cmd::kOpBits));
}
ANYEP_HD ANYEP_INLINE uint8_t cmd_flags(const TransferCmd& c) {
  return static_cast<uint8_t>((c.lo >> cmd::kFlagShift) & cmd::mask(cmd::kFlagBits));
}
ANYEP_HD ANYEP_INLINE uint32_t cmd_dst_rank(const TransferCmd& c) {
  return static_cast<uint32_t>((c.lo >> cmd::kDstRankShift) & cmd::mask(cmd::kDstRankBits));
}
ANYEP_HD ANYEP_INLINE uint32_t cmd_length(const TransferCmd& c) {
  return static_cast<uint32_t>((c.lo >> cmd::kLengthShift) & cmd::mask(cmd::kLengthBits));
}
ANYEP_HD ANYEP_INLINE uint32_t cmd_counter(const TransferCmd& c) { return cmd_length(c); }
ANYEP_HD ANYEP_INLINE uint32_t cmd_tag(const TransferCmd& c) {
  return static_cast<uint32_t>((c.lo >> cmd::kTagShift) & cmd::mask(cmd::kTagBits));
}
ANYEP_HD ANYEP_INLINE uint64_t cmd_src_offset(const TransferCmd& c) {
  return (c.hi & cmd::mask(cmd::kOffsetBits)) << cmd::kOffsetShift;
}
ANYEP_HD ANYEP_INLINE uint64_t cmd_dst_offset(const TransferCmd& c) {
  return (c.hi >> cmd::kOffsetBits) << cmd::kOffsetShift;
}
ANYEP_HD ANYEP_INLINE int32_t cmd_signal_value(const TransferCmd& c) {
  return static_cast<int32_t>(static_cast<uint32_t>(c.hi));  // the low 32 bits
}
ANYEP_HD ANYEP_INLINE uint32_t cmd_fence_count(const TransferCmd& c) { return static_cast<uint32_t>(c.hi >> 32); }
ANYEP_HD ANYEP_INLINE uint64_t cmd_ring_mask(const TransferCmd& c) { return c.hi; }
ANYEP_HD ANYEP_INLINE uint64_t cmd_epoch(const TransferCmd& c) { return c.hi; }

namespace detail {
ANYEP_HD ANYEP_INLINE uint64_t pack_lo(Op op, uint32_t flags, uint32_t dst_rank, uint32_t len_or_counter,
                                       uint32_t tag) {
  return (static_cast<uint64_t>(op) << cmd::kOpShift) | (static_cast<uint64_t>(flags) << cmd::kFlagShift) |
         (static_cast<uint64_t>(dst_rank) << cmd::kDstRankShift) |
         (static_cast<uint64_t>(len_or_counter) << cmd::kLengthShift) | (static_cast<uint64_t>(tag) << cmd::kTagShift);
}
}  // namespace detail

// ---- checked encoders: try_* report the first field that does not fit -------------------------

[[nodiscard]] ANYEP_HD ANYEP_INLINE CmdField try_make_write(TransferCmd* out, uint32_t dst_rank, uint64_t src_offset,
                                                            uint64_t dst_offset, uint64_t length, uint32_t tag,
                                                            bool signal) {
  if (dst_rank > cmd::kMaxDstRank) return CmdField::kDstRank;
  if (length > cmd::kMaxLength) return CmdField::kLength;
  if (tag > cmd::kMaxTag) return CmdField::kTag;
  if ((src_offset | dst_offset) & (cmd::kOffsetAlign - 1)) return CmdField::kOffsetAlignment;
  if (src_offset > cmd::kMaxOffset) return CmdField::kSrcOffset;
  if (dst_offset > cmd::kMaxOffset) return CmdField::kDstOffset;
  out->lo = detail::pack_lo(Op::kWrite, signal ? cmd::kWriteSignal : 0u, dst_rank, static_cast<uint32_t>(length), tag);
  out->hi = (src_offset >> cmd::kOffsetShift) | ((dst_offset >> cmd::kOffsetShift) << cmd::kOffsetBits);
  return CmdField::kNone;
}

[[nodiscard]] ANYEP_HD ANYEP_INLINE CmdField try_make_signal(TransferCmd* out, uint32_t dst_rank, uint32_t counter,
                                                             int32_t value, uint32_t fence_flags, uint32_t tag,
                                                             uint32_t fence_count) {
  if (dst_rank > cmd::kMaxDstRank) return CmdField::kDstRank;
  if (counter > cmd::kMaxCounter) return CmdField::kCounter;
  if (tag > cmd::kMaxTag) return CmdField::kTag;
  if (fence_flags & ~static_cast<uint32_t>(cmd::kFenceCount | cmd::kFenceOrdered)) return CmdField::kFlags;
  out->lo = detail::pack_lo(Op::kSignal, fence_flags, dst_rank, counter, tag);
  out->hi = static_cast<uint64_t>(static_cast<uint32_t>(value)) | (static_cast<uint64_t>(fence_count) << 32);
  return CmdField::kNone;
}

[[nodiscard]] ANYEP_HD ANYEP_INLINE CmdField try_make_quiet(TransferCmd* out, uint32_t dst_rank, uint64_t ring_mask) {
  if (dst_rank > cmd::kMaxDstRank) return CmdField::kDstRank;
  out->lo = detail::pack_lo(Op::kQuiet, 0, dst_rank, 0, 0);
  out->hi = ring_mask;
  return CmdField::kNone;
}

ANYEP_HD ANYEP_INLINE TransferCmd make_barrier(bool rail_only, uint64_t epoch) {
  TransferCmd c;
  c.lo = detail::pack_lo(Op::kBarrier, rail_only ? cmd::kBarrierRail : 0u, 0, 0, 0);
  c.hi = epoch;
  return c;
}

ANYEP_HD ANYEP_INLINE TransferCmd make_nop(uint64_t payload = 0) {
  TransferCmd c;
  c.lo = detail::pack_lo(Op::kNop, 0, 0, 0, 0);
  c.hi = payload;
  return c;
}

// ---- encoders that fail loudly: throw on the host, trap with a message on the device -----------

ANYEP_HD ANYEP_INLINE void cmd_encode_failed(const char* what, CmdField f, uint64_t value) {
#if defined(ANYEP_DEVICE_PASS)
  ANYEP_DEVICE_FAIL("%s: field %s does not fit (value %llu)\n", what, cmd_field_name(f),
                    static_cast<unsigned long long>(value));
#else
  throw InvalidArgument(std::string(what) + ": field '" + cmd_field_name(f) + "' does not fit its " +
                        "wire width (value " + std::to_string(value) + ")");
#endif
}

ANYEP_HD ANYEP_INLINE TransferCmd make_write(uint32_t dst_rank, uint64_t src_offset, uint64_t dst_offset,
                                             uint64_t length, uint32_t tag = 0, bool signal = false) {
  TransferCmd c;
  CmdField f = try_make_write(&c, dst_rank, src_offset, dst_offset, length, tag, signal);
  if (f != CmdField::kNone) {
    uint64_t v = f == CmdField::kDstRank     ? dst_rank
                 : f == CmdField::kLength    ? length
                 : f == CmdField::kTag       ? tag
                 : f == CmdField::kDstOffset ? dst_offset
                                             : src_offset;
    cmd_encode_failed("make_write", f, v);
  }
  return c;
}

ANYEP_HD ANYEP_INLINE TransferCmd make_signal(uint32_t dst_rank, uint32_t counter, int32_t value,
                                              uint32_t fence_flags = 0, uint32_t tag = 0, uint32_t fence_count = 0) {
  TransferCmd c;
  CmdField f = try_make_signal(&c, dst_rank, counter, value, fence_flags, tag, fence_count);
  if (f != CmdField::kNone) {
    uint64_t v = f == CmdField::kDstRank   ? dst_rank
                 : f == CmdField::kCounter ? counter
                 : f == CmdField::kTag     ? tag
                                           : fence_flags;
    cmd_encode_failed("make_signal", f, v);
  }
  return c;
}

ANYEP_HD ANYEP_INLINE TransferCmd make_quiet(uint32_t dst_rank = cmd::kAllPeers, uint64_t ring_mask = 0) {
  TransferCmd c;
  if (try_make_quiet(&c, dst_rank, ring_mask) != CmdField::kNone)
    cmd_encode_failed("make_quiet", CmdField::kDstRank, dst_rank);
  return c;
}

}  // namespace anyep::channel
