// The signal link alone, over a transport that only records: what a SIGNAL write carries, how
// sequence numbers, credits and staging slots bound what may be sent, and how the receiver reads
// records (in or out of order) and decides which credits to hand back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "common/error.h"
#include "fake_transport.h"
#include "proxy/signal_link.h"

using namespace anyep;
using namespace anyep::proxy;
using anyep::proxy::testing::FakeTransport;

namespace {

SignalRecord record(uint32_t counter, int32_t value, uint16_t tag) {
  SignalRecord r{};
  r.counter = counter;
  r.value = value;
  r.tag = tag;
  r.fence = static_cast<uint8_t>(Fence::kCount);
  r.fence_count = 3;
  return r;
}

bool same(const SignalRecord& a, const SignalRecord& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Two ranks' links, each on its own recording transport; deliver() plays the wire.
struct Pair {
  explicit Pair(uint32_t slots, uint32_t staging = 64)
      : ta(0, 2), tb(1, 2), a({0, 2, slots, staging}, ta, 0), b({1, 2, slots, staging}, tb, 0) {}
  // Copies write k of rank 0 into rank 1's signal area (as the transport would), then completes it
  // locally at rank 0; returns its immediate.
  uint32_t deliver(size_t k) {
    const transport::WriteDesc& w = ta.writes.at(k);
    EXPECT_EQ(w.remote_mr, b.signal_mr());
    std::memcpy(tb.mrs[w.remote_mr].base + w.remote_offset, ta.source(w), w.length);
    a.on_complete(w.context);
    return w.imm;
  }
  FakeTransport ta, tb;
  SignalLink a, b;
};

}  // namespace

TEST(SignalLink, RegistersAfterTheRegionsAndChecksItsConfig) {
  FakeTransport t(0, 2);
  int region = 0;
  t.register_memory(&region, sizeof region, transport::MemKind::kHost);  // a symmetric region: id 0
  SignalLink l({0, 2, 8, 4}, t, 1);
  EXPECT_EQ(l.signal_mr(), 1u);
  EXPECT_EQ(l.staging_mr(), 2u);
  EXPECT_EQ(t.mrs[1].length, 2 * 8 * sizeof(SignalRecord));  // [ranks][slots]
  EXPECT_EQ(t.mrs[2].length, 4 * sizeof(SignalRecord));

  FakeTransport u(0, 2);
  EXPECT_THROW(SignalLink({0, 2, 8, 4}, u, 1), InternalError);  // ids 0, 1 where 1, 2 were expected
  EXPECT_THROW(SignalLink::check({0, 2, 6, 4}), InvalidArgument);
  EXPECT_THROW(SignalLink::check({0, 2, 2, 4}), InvalidArgument);
  EXPECT_THROW(SignalLink::check({0, 2, 8, 0}), InvalidArgument);
  EXPECT_NO_THROW(SignalLink::check({0, 2, 4, 1}));
}

TEST(SignalLink, SendWritesTheRecordIntoOurSlotOfThePeersArea) {
  FakeTransport t(1, 3);
  SignalLink l({1, 3, 8, 4}, t, 0);
  ASSERT_EQ(l.send(2, record(5, -3, 7), 3), 0);
  ASSERT_EQ(l.send(2, record(6, 4, 9), 1), 0);
  ASSERT_EQ(l.send(0, record(1, 1, 1), 0), 0);
  ASSERT_EQ(t.writes.size(), 3u);

  const transport::WriteDesc& w = t.writes[0];
  EXPECT_EQ(w.dst_rank, 2u);
  EXPECT_EQ(w.local_mr, l.staging_mr());
  EXPECT_EQ(w.local_offset, 0u);
  EXPECT_EQ(w.remote_mr, l.signal_mr());
  EXPECT_EQ(w.remote_offset, (1u * 8 + 0) * sizeof(SignalRecord));  // sender rank 1's row, slot 0
  EXPECT_EQ(w.length, sizeof(SignalRecord));
  EXPECT_TRUE(w.has_imm);
  EXPECT_EQ(w.imm, imm::encode_signal(0));
  EXPECT_EQ(completion::ring(w.context), 3u);
  EXPECT_EQ(completion::staging_plus_one(w.context), 1u);
  SignalRecord want = record(5, -3, 7);
  want.seq = 0;
  EXPECT_TRUE(same(*reinterpret_cast<const SignalRecord*>(t.source(w)), want));

  // Sequence numbers count per destination; staging slots advance for every send.
  EXPECT_EQ(t.writes[1].imm, imm::encode_signal(1));
  EXPECT_EQ(t.writes[1].remote_offset, (1u * 8 + 1) * sizeof(SignalRecord));
  EXPECT_EQ(t.writes[1].local_offset, 1 * sizeof(SignalRecord));
  EXPECT_EQ(t.writes[2].imm, imm::encode_signal(0));
  EXPECT_EQ(completion::staging_plus_one(t.writes[2].context), 3u);
  EXPECT_EQ(l.next_seq(2), 2u);
  EXPECT_EQ(l.next_seq(0), 1u);
  EXPECT_EQ(l.credit(2), 6u);
  EXPECT_EQ(l.credit(0), 7u);
}

TEST(SignalLink, CreditsBoundTheRecordsInFlightPerPeer) {
  FakeTransport t(0, 3);
  SignalLink l({0, 3, 4, 64}, t, 0);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(l.send(1, record(0, 1, 0), 0), 0);
  EXPECT_EQ(l.credit(1), 0u);
  EXPECT_EQ(l.send(1, record(0, 1, 0), 0), -EAGAIN);  // the peer has not freed a slot
  EXPECT_EQ(t.writes.size(), 4u);
  EXPECT_EQ(l.next_seq(1), 4u);
  EXPECT_EQ(l.send(2, record(0, 1, 0), 0), 0);  // other peers are not held up

  ASSERT_EQ(l.on_credit(1, imm::encode_credit(3)), 0);
  EXPECT_EQ(l.credit(1), 3u);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(l.send(1, record(0, 1, 0), 0), 0);
  EXPECT_EQ(l.send(1, record(0, 1, 0), 0), -EAGAIN);
  EXPECT_EQ(t.writes.back().imm, imm::encode_signal(6));
  EXPECT_EQ(t.writes.back().remote_offset, (0u * 4 + 6 % 4) * sizeof(SignalRecord));

  // More credits than slots: the peer broke the protocol.
  EXPECT_EQ(l.on_credit(2, imm::encode_credit(2)), -EPROTO);
  EXPECT_EQ(l.last_error(), "rank 2 returned more signal credits than exist");
}

TEST(SignalLink, StagingSlotsAreReusedOnlyAfterTheirWriteCompleted) {
  FakeTransport t(0, 2);
  SignalLink l({0, 2, 16, 2}, t, 0);
  ASSERT_EQ(l.send(1, record(0, 1, 0), 0), 0);
  ASSERT_EQ(l.send(1, record(0, 2, 0), 0), 0);
  EXPECT_EQ(l.send(1, record(0, 3, 0), 0), -EAGAIN);  // both slots in flight
  l.on_complete(completion::make(0));                 // a completion that carries no slot
  EXPECT_EQ(l.send(1, record(0, 3, 0), 0), -EAGAIN);
  l.on_complete(t.writes[1].context);  // slot 1 frees, but the next slot in turn is 0
  EXPECT_EQ(l.send(1, record(0, 3, 0), 0), -EAGAIN);
  l.on_complete(t.writes[0].context);
  ASSERT_EQ(l.send(1, record(0, 3, 0), 0), 0);
  EXPECT_EQ(t.writes[2].local_offset, 0u);  // wrapped to slot 0
  ASSERT_EQ(l.send(1, record(0, 4, 0), 0), 0);
  EXPECT_EQ(t.writes[3].local_offset, sizeof(SignalRecord));
  EXPECT_EQ(l.next_seq(1), 4u);
}

TEST(SignalLink, AFailedPostCommitsNothing) {
  FakeTransport t(0, 2);
  SignalLink l({0, 2, 4, 1}, t, 0);
  t.fail = {-EAGAIN, -EIO};
  EXPECT_EQ(l.send(1, record(0, 1, 0), 0), -EAGAIN);
  EXPECT_EQ(l.send(1, record(0, 1, 0), 0), -EIO);
  EXPECT_EQ(l.next_seq(1), 0u);
  EXPECT_EQ(l.credit(1), 4u);
  ASSERT_EQ(l.send(1, record(0, 1, 0), 0), 0);  // the one staging slot was not taken
  EXPECT_EQ(t.writes[0].imm, imm::encode_signal(0));
}

TEST(SignalLink, ReceiverReadsRecordsAndReturnsCreditsInContiguousRuns) {
  Pair p(8);  // credits go back in batches of 8 / 4 = 2
  SignalRecord sent[4];
  for (uint32_t i = 0; i < 4; ++i) {
    sent[i] = record(i, static_cast<int32_t>(10 * i), static_cast<uint16_t>(i));
    ASSERT_EQ(p.a.send(1, sent[i], 0), 0);
    sent[i].seq = i;
  }
  uint32_t imms[4];
  for (size_t k = 0; k < 4; ++k) imms[k] = p.deliver(k);

  SignalRecord got;
  ASSERT_EQ(p.b.receive(0, imms[1], &got), 0);  // out of order: slot 0 is still unread
  EXPECT_TRUE(same(got, sent[1]));
  EXPECT_FALSE(p.b.credits_pending());
  EXPECT_EQ(p.b.owed(0), 0u);
  ASSERT_EQ(p.b.receive(0, imms[0], &got), 0);  // slots 0 and 1 free together
  EXPECT_TRUE(same(got, sent[0]));
  EXPECT_TRUE(p.b.credits_pending());
  EXPECT_EQ(p.b.owed(0), 2u);
  ASSERT_EQ(p.b.receive(0, imms[2], &got), 0);
  EXPECT_TRUE(same(got, sent[2]));
  EXPECT_EQ(p.b.owed(0), 3u);  // one freed, below the batch: kept

  ASSERT_EQ(p.b.send_credits(), 0);
  EXPECT_FALSE(p.b.credits_pending());
  ASSERT_EQ(p.tb.imms.size(), 1u);
  EXPECT_EQ(p.tb.imms[0].dst, 0u);
  EXPECT_EQ(p.tb.imms[0].imm, imm::encode_credit(2));
  EXPECT_EQ(completion::ring(p.tb.imms[0].context), completion::kNoRing);
  EXPECT_EQ(completion::staging_plus_one(p.tb.imms[0].context), 0u);
  EXPECT_EQ(p.b.owed(0), 1u);
  EXPECT_EQ(p.a.credit(1), 4u);
  ASSERT_EQ(p.a.on_credit(1, p.tb.imms[0].imm), 0);
  EXPECT_EQ(p.a.credit(1), 6u);
}

TEST(SignalLink, ALappedSlotIsDetected) {
  Pair p(4);
  ASSERT_EQ(p.a.send(1, record(1, 1, 1), 0), 0);
  p.deliver(0);
  SignalRecord got;
  // An immediate naming seq 4 finds the record of seq 0 in slot 0.
  EXPECT_EQ(p.b.receive(0, imm::encode_signal(4), &got), -EPROTO);
  EXPECT_EQ(p.b.last_error(), "signal record 4 from rank 0 holds sequence 0 (slot overwritten or lost)");
}

TEST(SignalLink, CreditsThatMeetBackpressureStayPending) {
  Pair p(4);  // batches of 1
  for (size_t k = 0; k < 2; ++k) {
    ASSERT_EQ(p.a.send(1, record(0, 1, 0), 0), 0);
    SignalRecord got;
    ASSERT_EQ(p.b.receive(0, p.deliver(k), &got), 0);
  }
  EXPECT_EQ(p.b.owed(0), 2u);
  p.tb.fail = {-EAGAIN};
  ASSERT_EQ(p.b.send_credits(), 0);
  EXPECT_TRUE(p.b.credits_pending());
  EXPECT_TRUE(p.tb.imms.empty());
  ASSERT_EQ(p.b.send_credits(), 0);
  EXPECT_FALSE(p.b.credits_pending());
  ASSERT_EQ(p.tb.imms.size(), 1u);
  EXPECT_EQ(p.tb.imms[0].imm, imm::encode_credit(2));

  ASSERT_EQ(p.a.send(1, record(0, 1, 0), 0), 0);
  SignalRecord got;
  ASSERT_EQ(p.b.receive(0, p.deliver(2), &got), 0);
  p.tb.fail = {-EIO};
  EXPECT_EQ(p.b.send_credits(), -EPROTO);
  EXPECT_EQ(p.b.last_error(), "returning signal credits to rank 0 failed: fake failure");
}

// Many signals through few slots, read in shuffled windows: every record arrives intact and in
// its sequence, and credits let the sender go on forever without ever lapping an unread slot.
TEST(SignalLink, ShuffledReadsNeverLapASlot) {
  Pair p(8, 4);
  std::mt19937 rng(12345);
  uint32_t sent = 0, read = 0;
  std::vector<size_t> in_flight;  // writes delivered, immediates not yet read
  std::vector<uint32_t> pending_imm;
  while (read < 5000) {
    // Send while credits and staging allow.
    while (sent < 5000) {
      const SignalRecord r = record(sent % 97, static_cast<int32_t>(sent), static_cast<uint16_t>(sent % 13));
      const int rc = p.a.send(1, r, 0);
      if (rc == -EAGAIN) break;
      ASSERT_EQ(rc, 0);
      pending_imm.push_back(p.deliver(p.ta.writes.size() - 1));
      ++sent;
    }
    ASSERT_FALSE(pending_imm.empty()) << "sender stalled at " << sent << " with everything read";
    // Read a random subset, in random order.
    std::shuffle(pending_imm.begin(), pending_imm.end(), rng);
    const size_t n = 1 + rng() % pending_imm.size();
    for (size_t i = 0; i < n; ++i) {
      SignalRecord got;
      ASSERT_EQ(p.b.receive(0, pending_imm[i], &got), 0) << p.b.last_error();
      EXPECT_EQ(got.seq, imm::signal_seq(pending_imm[i]));
      EXPECT_EQ(got.value, static_cast<int32_t>(got.seq));
      EXPECT_EQ(got.counter, got.seq % 97);
      ++read;
    }
    pending_imm.erase(pending_imm.begin(), pending_imm.begin() + static_cast<ptrdiff_t>(n));
    if (p.b.credits_pending()) {
      const size_t before = p.tb.imms.size();
      ASSERT_EQ(p.b.send_credits(), 0);
      for (size_t k = before; k < p.tb.imms.size(); ++k) ASSERT_EQ(p.a.on_credit(1, p.tb.imms[k].imm), 0);
    }
    ASSERT_LE(p.a.credit(1), 8u);
  }
  EXPECT_EQ(sent, 5000u);
  EXPECT_EQ(p.a.next_seq(1), 5000u);
  EXPECT_EQ(p.a.credit(1) + p.b.owed(0), 8u);  // every slot is either ours to fill or owed back
}
