#include <gtest/gtest.h>

#include "channel/transfer_cmd.h"

using namespace anyep;

TEST(TransferCmd, WriteRoundTripAtLimits) {
  TransferCmd c = make_write(cmd::kMaxDstRank, cmd::kMaxOffset, cmd::kMaxOffset - 16, cmd::kMaxLength,
                             cmd::kMaxTag, true);
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
