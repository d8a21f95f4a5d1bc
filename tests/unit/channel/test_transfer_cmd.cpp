#include <gtest/gtest.h>

#include "channel/transfer_cmd.h"

using namespace anyep;
using namespace anyep::channel;

TEST(TransferCmd, WriteRoundTripAtLimits) {
  TransferCmd c =
      make_write(cmd::kMaxDstRank, cmd::kMaxOffset, cmd::kMaxOffset - 16, cmd::kMaxLength, cmd::kMaxTag, true);
  EXPECT_EQ(cmd_op(c), Op::kWrite);
  EXPECT_EQ(cmd_dst_rank(c), 65535u);
  EXPECT_EQ(cmd_src_offset(c), (64ull << 30) - 16);
  EXPECT_EQ(cmd_dst_offset(c), (64ull << 30) - 32);
  EXPECT_EQ(cmd_length(c), (1u << 24) - 1);
  EXPECT_EQ(cmd_tag(c), 65535u);
  EXPECT_EQ(cmd_flags(c), cmd::kWriteSignal);
}

TEST(TransferCmd, WriteRejectsPastLimits) {
  EXPECT_THROW(make_write(65536, 0, 0, 1), InvalidArgument);
  EXPECT_THROW(make_write(0, 0, 0, 1u << 24), InvalidArgument);
  EXPECT_THROW(make_write(0, 64ull << 30, 0, 1), InvalidArgument);
  EXPECT_THROW(make_write(0, 0, 64ull << 30, 1), InvalidArgument);
  EXPECT_THROW(make_write(0, 8, 0, 1), InvalidArgument);  // not 16-byte aligned
  EXPECT_THROW(make_write(0, 0, 0, 1, 65536), InvalidArgument);
  try {
    make_write(70000, 0, 0, 1);
    FAIL() << "expected a throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("dst_rank"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("70000"), std::string::npos) << e.what();
  }
}

TEST(TransferCmd, SignalRoundTripAndLimits) {
  TransferCmd c = make_signal(1023, cmd::kMaxCounter, -65535, cmd::kFenceCount, 1023, 0xffffffffu);
  EXPECT_EQ(cmd_op(c), Op::kSignal);
  EXPECT_EQ(cmd_dst_rank(c), 1023u);
  EXPECT_EQ(cmd_counter(c), cmd::kMaxCounter);
  EXPECT_EQ(cmd_signal_value(c), -65535);
  EXPECT_EQ(cmd_flags(c), cmd::kFenceCount);
  EXPECT_EQ(cmd_tag(c), 1023u);
  EXPECT_EQ(cmd_fence_count(c), 0xffffffffu);
  EXPECT_THROW(make_signal(0, cmd::kMaxCounter + 1, 1), InvalidArgument);
  EXPECT_THROW(make_signal(0, 0, 1, 1u << 3), InvalidArgument);
  EXPECT_THROW(make_signal(65536, 0, 1), InvalidArgument);
}

TEST(TransferCmd, QuietBarrierNop) {
  TransferCmd q = make_quiet(7, 0xf0f0);
  EXPECT_EQ(cmd_op(q), Op::kQuiet);
  EXPECT_EQ(cmd_dst_rank(q), 7u);
  EXPECT_EQ(cmd_ring_mask(q), 0xf0f0u);
  TransferCmd b = make_barrier(true, 42);
  EXPECT_EQ(cmd_op(b), Op::kBarrier);
  EXPECT_EQ(cmd_flags(b), cmd::kBarrierRail);
  EXPECT_EQ(cmd_epoch(b), 42u);
  EXPECT_EQ(cmd_op(make_nop()), Op::kNop);
  // A published command is never all-zero in its op field.
  EXPECT_NE(make_nop().lo & cmd::mask(cmd::kOpBits), 0u);
}

TEST(TransferCmd, EveryFieldIndependent) {
  // Setting one field to its max must not leak into any other.
  TransferCmd c = make_write(0, 0, 0, cmd::kMaxLength);
  EXPECT_EQ(cmd_dst_rank(c), 0u);
  EXPECT_EQ(cmd_tag(c), 0u);
  EXPECT_EQ(cmd_src_offset(c), 0u);
  c = make_write(cmd::kMaxDstRank, 0, 0, 0);
  EXPECT_EQ(cmd_length(c), 0u);
  EXPECT_EQ(cmd_flags(c), 0u);
  c = make_write(0, 0, cmd::kMaxOffset, 0);
  EXPECT_EQ(cmd_src_offset(c), 0u);
}

// Every field at 0 and at its maximum decodes to what was encoded; one past the maximum is refused
// by the try_* encoder with that field's name and by the throwing encoder with an exception.
TEST(TransferCmd, WriteEachFieldAtItsLimits) {
  struct Case {
    uint32_t rank;
    uint64_t src, dst, len;
    uint32_t tag;
  };
  for (const Case& k : {Case{0, 0, 0, 0, 0}, Case{cmd::kMaxDstRank, 0, 0, 0, 0}, Case{0, cmd::kMaxOffset, 0, 0, 0},
                        Case{0, 0, cmd::kMaxOffset, 0, 0}, Case{0, 0, 0, cmd::kMaxLength, 0},
                        Case{0, 0, 0, 0, cmd::kMaxTag}, Case{1024, 16, 32, 7168, 3}}) {
    for (bool sig : {false, true}) {
      TransferCmd c;
      ASSERT_EQ(try_make_write(&c, k.rank, k.src, k.dst, k.len, k.tag, sig), CmdField::kNone);
      EXPECT_EQ(cmd_op(c), Op::kWrite);
      EXPECT_EQ(cmd_dst_rank(c), k.rank);
      EXPECT_EQ(cmd_src_offset(c), k.src);
      EXPECT_EQ(cmd_dst_offset(c), k.dst);
      EXPECT_EQ(cmd_length(c), k.len);
      EXPECT_EQ(cmd_tag(c), k.tag);
      EXPECT_EQ(cmd_flags(c), sig ? cmd::kWriteSignal : 0u);
    }
  }
}

TEST(TransferCmd, TryEncodersNameTheFieldPastItsLimit) {
  TransferCmd c;
  EXPECT_EQ(try_make_write(&c, cmd::kMaxDstRank + 1, 0, 0, 0, 0, false), CmdField::kDstRank);
  EXPECT_EQ(try_make_write(&c, 0, 0, 0, uint64_t{cmd::kMaxLength} + 1, 0, false), CmdField::kLength);
  EXPECT_EQ(try_make_write(&c, 0, 0, 0, 0, cmd::kMaxTag + 1, false), CmdField::kTag);
  EXPECT_EQ(try_make_write(&c, 0, cmd::kMaxOffset + 16, 0, 0, 0, false), CmdField::kSrcOffset);
  EXPECT_EQ(try_make_write(&c, 0, 0, cmd::kMaxOffset + 16, 0, 0, false), CmdField::kDstOffset);
  EXPECT_EQ(try_make_write(&c, 0, 1, 0, 0, 0, false), CmdField::kOffsetAlignment);
  EXPECT_EQ(try_make_write(&c, 0, 0, 15, 0, 0, false), CmdField::kOffsetAlignment);
  EXPECT_EQ(try_make_signal(&c, cmd::kMaxDstRank + 1, 0, 0, 0, 0, 0), CmdField::kDstRank);
  EXPECT_EQ(try_make_signal(&c, 0, cmd::kMaxCounter + 1, 0, 0, 0, 0), CmdField::kCounter);
  EXPECT_EQ(try_make_signal(&c, 0, 0, 0, 0, cmd::kMaxTag + 1, 0), CmdField::kTag);
  EXPECT_EQ(try_make_signal(&c, 0, 0, 0, 1u << 2, 0, 0), CmdField::kFlags);
  EXPECT_EQ(try_make_quiet(&c, cmd::kMaxDstRank + 1, 0), CmdField::kDstRank);
  // A refused encode leaves the output untouched.
  c = make_nop(99);
  EXPECT_NE(try_make_write(&c, cmd::kMaxDstRank + 1, 0, 0, 0, 0, false), CmdField::kNone);
  EXPECT_EQ(cmd_op(c), Op::kNop);
  EXPECT_EQ(c.hi, 99u);
}

TEST(TransferCmd, ThrowingEncodersNameFieldAndValue) {
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "(no exception)";
  };
  std::string m = message([] { make_write(0, 0, 0, uint64_t{cmd::kMaxLength} + 1); });
  EXPECT_NE(m.find("'length'"), std::string::npos) << m;
  EXPECT_NE(m.find(std::to_string(cmd::kMaxLength + 1)), std::string::npos) << m;
  m = message([] { make_write(0, 0, cmd::kMaxOffset + 16, 0); });
  EXPECT_NE(m.find("'dst_offset'"), std::string::npos) << m;
  m = message([] { make_write(0, cmd::kMaxOffset + 16, 0, 0); });
  EXPECT_NE(m.find("'src_offset'"), std::string::npos) << m;
  m = message([] { make_write(0, 0, 0, 0, cmd::kMaxTag + 1); });
  EXPECT_NE(m.find("'tag'"), std::string::npos) << m;
  m = message([] { make_signal(0, cmd::kMaxCounter + 1, 1); });
  EXPECT_NE(m.find("'counter'"), std::string::npos) << m;
  m = message([] { make_signal(0, 0, 1, 0, cmd::kMaxTag + 1); });
  EXPECT_NE(m.find("'tag'"), std::string::npos) << m;
  m = message([] { make_signal(0, 0, 1, 1u << 3); });
  EXPECT_NE(m.find("'flags'"), std::string::npos) << m;
  m = message([] { make_quiet(cmd::kMaxDstRank + 1); });
  EXPECT_NE(m.find("'dst_rank'"), std::string::npos) << m;
  EXPECT_NE(m.find("65536"), std::string::npos) << m;
}

TEST(TransferCmd, SignalValueAndFenceCountFullRange) {
  for (int32_t v : {INT32_MIN, -1, 0, 1, INT32_MAX}) {
    for (uint32_t fc : {0u, 1u, 0xffffffffu}) {
      TransferCmd c = make_signal(cmd::kMaxDstRank, 0, v, cmd::kFenceCount | cmd::kFenceOrdered, cmd::kMaxTag, fc);
      EXPECT_EQ(cmd_signal_value(c), v);
      EXPECT_EQ(cmd_fence_count(c), fc);
      EXPECT_EQ(cmd_counter(c), 0u);
      EXPECT_EQ(cmd_dst_rank(c), cmd::kMaxDstRank);
      EXPECT_EQ(cmd_tag(c), cmd::kMaxTag);
      EXPECT_EQ(cmd_flags(c), cmd::kFenceCount | cmd::kFenceOrdered);
    }
  }
}

TEST(TransferCmd, WideFieldsAndPublishedMarker) {
  EXPECT_EQ(cmd_ring_mask(make_quiet(cmd::kAllPeers, ~0ull)), ~0ull);
  EXPECT_EQ(cmd_dst_rank(make_quiet()), cmd::kAllPeers);
  EXPECT_EQ(cmd_epoch(make_barrier(false, ~0ull)), ~0ull);
  EXPECT_EQ(cmd_flags(make_barrier(false, 0)), 0u);
  EXPECT_EQ(make_nop(~0ull).hi, ~0ull);
  // Every encoder sets a non-empty op, so every published command is distinguishable from a
  // cleared slot even when all its other fields are zero.
  EXPECT_NE(cmd_op(make_write(0, 0, 0, 0)), Op::kEmpty);
  EXPECT_NE(cmd_op(make_signal(0, 0, 0)), Op::kEmpty);
  EXPECT_NE(cmd_op(make_quiet(0, 0)), Op::kEmpty);
  EXPECT_NE(cmd_op(make_barrier(false, 0)), Op::kEmpty);
  EXPECT_LE(kNumOps, 1 << cmd::kOpBits);
}
