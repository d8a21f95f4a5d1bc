#include <gtest/gtest.h>

#include "proxy/imm_format.h"

using namespace anyep::proxy;

TEST(ImmFormat, WriteRoundTripsEveryField) {
  for (uint32_t tag : {0u, 1u, 1023u, 1024u, imm::kMaxTags - 1})
    for (uint32_t seg : {0u, 1u, 200u, 255u})
      for (bool one : {false, true}) {
        const uint32_t v = imm::encode_write(tag, seg, one);
        EXPECT_EQ(imm::kind(v), imm::Kind::kWrite);
        EXPECT_EQ(imm::write_tag(v), tag);
        EXPECT_EQ(imm::write_segment(v), seg);
        EXPECT_EQ(imm::write_plus_one(v), one);
        EXPECT_TRUE(imm::write_reserved_clear(v));
      }
  EXPECT_FALSE(imm::write_reserved_clear(imm::encode_write(1, 2, true) | (1u << 25)));
}

TEST(ImmFormat, SignalBarrierCreditRoundTrip) {
  for (uint32_t seq : {0u, 1u, 12345u, imm::kSeqMask}) {
    EXPECT_EQ(imm::kind(imm::encode_signal(seq)), imm::Kind::kSignal);
    EXPECT_EQ(imm::signal_seq(imm::encode_signal(seq)), seq);
  }
  EXPECT_EQ(imm::signal_seq(imm::encode_signal(imm::kSeqMask + 1)), 0u) << "sequence numbers wrap mod 2^30";
  const uint32_t b = imm::encode_barrier(70000, true);
  EXPECT_EQ(imm::kind(b), imm::Kind::kBarrier);
  EXPECT_EQ(imm::barrier_epoch(b), 70000u & imm::kEpochMask);
  EXPECT_TRUE(imm::barrier_rail(b));
  EXPECT_FALSE(imm::barrier_rail(imm::encode_barrier(3, false)));
  EXPECT_TRUE(imm::barrier_reserved_clear(b));
  EXPECT_EQ(imm::kind(imm::encode_credit(64)), imm::Kind::kCredit);
  EXPECT_EQ(imm::credit_slots(imm::encode_credit(64)), 64u);
}

TEST(ImmFormat, LimitsMeetTheTargets) {
  EXPECT_GE(imm::kMaxTags, 1024u) << "1024 local experts";
  // Token counts travel in the 32-bit SignalRecord::fence_count, not in the immediate.
  SignalRecord r{};
  r.fence_count = 65535;
  EXPECT_EQ(r.fence_count, 65535u);
  r.counter = (1u << 24) - 1;
  EXPECT_EQ(r.counter, (1u << 24) - 1);
}
