// The barrier tracker alone, flat over a transport that only records (the hierarchical barrier
// through shared memory is covered end to end by test_host_barrier): arrivals sent once our writes
// are complete, arrivals counted per peer (early ones too), epochs checked, membership of the rail
// and all-rank sets, and the text naming who is missing.
#include <gtest/gtest.h>

#include "common/error.h"
#include "fake_transport.h"
#include "proxy/barrier_tracker.h"
#include "proxy/imm_format.h"

using namespace anyep;
using namespace anyep::proxy;
using anyep::proxy::testing::FakeTransport;

namespace {

// `n` ranks in hosts of `per_host` consecutive ranks, seen from `rank`.
HostLayout layout(uint32_t rank, uint32_t n, uint32_t per_host) {
  HostLayout L;
  L.rank = rank;
  L.ranks_per_host = per_host;
  L.num_hosts = (n + per_host - 1) / per_host;
  L.host = rank / per_host;
  for (uint32_t p = 0; p < n; ++p) {
    L.host_of.push_back(p / per_host);
    L.local_index.push_back(p % per_host);
    if (p % per_host == 0) L.leader_of_host.push_back(p);
    if (p / per_host == L.host) L.local_ranks.push_back(p);
  }
  return L;
}

std::vector<uint32_t> destinations(const FakeTransport& t) {
  std::vector<uint32_t> d;
  for (const auto& i : t.imms) d.push_back(i.dst);
  return d;
}

}  // namespace

TEST(BarrierTracker, FlatBarrierWaitsForOwnWritesThenForEveryArrival) {
  const HostLayout L = layout(0, 4, 1);
  FakeTransport t(0, 4);
  BarrierTracker bt(L, nullptr, 0, t);
  BarrierState b;
  bt.begin(b, false, 7);
  EXPECT_EQ(b.target, 1u);
  EXPECT_EQ(bt.entered(false), 1u);

  uint64_t outstanding = 2;  // earlier writes of the ring not yet complete: nothing is sent
  EXPECT_EQ(bt.advance(b, outstanding, 42), 0);
  EXPECT_TRUE(t.imms.empty());
  EXPECT_EQ(bt.missing(b, outstanding),
            " (own ring still has 2 incomplete writes) rank 1 (host 1, entered 0) rank 2 (host 2, entered 0)"
            " rank 3 (host 3, entered 0)");

  outstanding = 0;
  EXPECT_EQ(bt.advance(b, outstanding, 42), 0);
  EXPECT_EQ(destinations(t), (std::vector<uint32_t>{1, 2, 3}));
  for (const auto& i : t.imms) {
    EXPECT_EQ(i.imm, imm::encode_barrier(7, false));
    EXPECT_EQ(i.context, 42u);
  }
  EXPECT_EQ(outstanding, 3u);  // our arrivals count on the ring
  EXPECT_EQ(bt.advance(b, outstanding, 42), 0);
  outstanding = 0;  // they completed

  ASSERT_EQ(bt.on_arrival(1, imm::encode_barrier(7, false)), 0);
  ASSERT_EQ(bt.on_arrival(3, imm::encode_barrier(7, false)), 0);
  EXPECT_EQ(bt.advance(b, outstanding, 42), 0);
  EXPECT_EQ(bt.missing(b, outstanding), " rank 2 (host 2, entered 0)");
  ASSERT_EQ(bt.on_arrival(2, imm::encode_barrier(7, false)), 0);
  EXPECT_EQ(bt.advance(b, outstanding, 42), 1);
  EXPECT_EQ(t.imms.size(), 3u);  // each member got our arrival once
  EXPECT_EQ(bt.arrivals(false, 2), 1u);
  EXPECT_EQ(bt.missing(b, outstanding), "");
}

TEST(BarrierTracker, BackpressureResumesWithTheNextPeer) {
  const HostLayout L = layout(2, 4, 1);
  FakeTransport t(2, 4);
  BarrierTracker bt(L, nullptr, 0, t);
  BarrierState b;
  bt.begin(b, false, 1);
  uint64_t outstanding = 0;
  t.fail = {0, -EAGAIN};
  EXPECT_EQ(bt.advance(b, outstanding, 0), 0);
  EXPECT_EQ(destinations(t), (std::vector<uint32_t>{0}));
  EXPECT_EQ(outstanding, 1u);
  outstanding = 0;
  EXPECT_EQ(bt.advance(b, outstanding, 0), 0);
  EXPECT_EQ(destinations(t), (std::vector<uint32_t>{0, 1, 3}));  // 0 not again; 2 is us
}

TEST(BarrierTracker, AFailedPostIsAnError) {
  const HostLayout L = layout(0, 2, 1);
  FakeTransport t(0, 2);
  BarrierTracker bt(L, nullptr, 0, t);
  BarrierState b;
  bt.begin(b, false, 1);
  uint64_t outstanding = 0;
  t.fail = {-EIO};
  EXPECT_EQ(bt.advance(b, outstanding, 0), -EPROTO);
  EXPECT_EQ(bt.last_error(), "BARRIER: posting to rank 1 failed: fake failure");
}

TEST(BarrierTracker, EarlyArrivalsAreCountedAndTheirEpochsChecked) {
  const HostLayout L = layout(0, 2, 1);
  FakeTransport t(0, 2);
  BarrierTracker bt(L, nullptr, 0, t);
  // The peer entered barriers 1 and 2 before we reached the first (a member is at most one ahead).
  ASSERT_EQ(bt.on_arrival(1, imm::encode_barrier(7, false)), 0);
  ASSERT_EQ(bt.on_arrival(1, imm::encode_barrier(8, false)), 0);
  EXPECT_EQ(bt.arrivals(false, 1), 2u);
  uint64_t outstanding = 0;
  BarrierState b;
  bt.begin(b, false, 7);
  EXPECT_EQ(bt.advance(b, outstanding, 0), 0);  // sends our arrival
  outstanding = 0;
  EXPECT_EQ(bt.advance(b, outstanding, 0), 1);
  bt.begin(b, false, 0x10008);  // epochs compare mod 2^16
  EXPECT_EQ(b.target, 2u);
  EXPECT_EQ(bt.advance(b, outstanding, 0), 0);
  outstanding = 0;
  EXPECT_EQ(bt.advance(b, outstanding, 0), 1);
  EXPECT_EQ(t.imms.back().imm, imm::encode_barrier(8, false));

  ASSERT_EQ(bt.on_arrival(1, imm::encode_barrier(10, false)), 0);
  bt.begin(b, false, 9);
  EXPECT_EQ(bt.advance(b, outstanding, 0), 0);
  outstanding = 0;
  EXPECT_EQ(bt.advance(b, outstanding, 0), -EINVAL);
  EXPECT_EQ(bt.last_error(),
            "BARRIER #3: rank 1 (host 1) entered it with epoch 10 but this rank with epoch 9 (mod 2^16; mismatched "
            "barriers)");
}

TEST(BarrierTracker, RailBarrierJoinsTheSameLocalIndexOnEveryHost) {
  // 3 hosts of 2 ranks; rank 3 is index 1 on host 1. No shared memory: every barrier is flat.
  const HostLayout L = layout(3, 6, 2);
  FakeTransport t(3, 6);
  BarrierTracker bt(L, nullptr, 0, t);
  EXPECT_TRUE(bt.in_set(1, true));
  EXPECT_TRUE(bt.in_set(5, true));
  EXPECT_FALSE(bt.in_set(2, true));
  EXPECT_FALSE(bt.in_set(4, true));
  EXPECT_TRUE(bt.in_set(4, false));  // all ranks: host leaders
  EXPECT_FALSE(bt.in_set(5, false));

  BarrierState b;
  bt.begin(b, true, 5);
  uint64_t outstanding = 0;
  EXPECT_EQ(bt.advance(b, outstanding, 0), 0);
  EXPECT_EQ(destinations(t), (std::vector<uint32_t>{1, 5}));
  EXPECT_EQ(t.imms[0].imm, imm::encode_barrier(5, true));
  outstanding = 0;
  EXPECT_EQ(bt.missing(b, outstanding), " rank 1 (host 0, entered 0) rank 5 (host 2, entered 0)");
  ASSERT_EQ(bt.on_arrival(5, imm::encode_barrier(5, true)), 0);
  ASSERT_EQ(bt.on_arrival(1, imm::encode_barrier(5, true)), 0);
  EXPECT_EQ(bt.advance(b, outstanding, 0), 1);
  // Rail and all-rank barriers are numbered separately.
  EXPECT_EQ(bt.entered(true), 1u);
  EXPECT_EQ(bt.entered(false), 0u);
  EXPECT_EQ(bt.arrivals(false, 1), 0u);

  EXPECT_EQ(bt.on_arrival(2, imm::encode_barrier(5, true)), -EPROTO);
  EXPECT_EQ(bt.last_error(),
            "rail barrier arrival from rank 2 (host 1), which is not a member of this rank's barrier (ranks disagree "
            "on the host layout?)");
  // An all-rank arrival reaches leaders only; rank 3 is not one.
  EXPECT_EQ(bt.on_arrival(0, imm::encode_barrier(5, false)), -EPROTO);
  EXPECT_EQ(bt.on_arrival(1, imm::encode_barrier(5, false) | (1u << 20)), -EPROTO);
  EXPECT_EQ(bt.last_error(), "malformed barrier immediate from rank 1");
}

TEST(BarrierTracker, MissingNamesAtMostSixteen) {
  const HostLayout L = layout(0, 40, 1);
  FakeTransport t(0, 40);
  BarrierTracker bt(L, nullptr, 0, t);
  BarrierState b;
  bt.begin(b, false, 1);
  for (uint32_t p = 1; p < 40; p += 2) ASSERT_EQ(bt.on_arrival(p, imm::encode_barrier(1, false)), 0);
  const std::string m = bt.missing(b, 0);
  size_t named = 0;
  for (size_t at = m.find(" rank "); at != std::string::npos; at = m.find(" rank ", at + 1)) ++named;
  EXPECT_EQ(named, 16u);
  EXPECT_EQ(m.rfind(" rank 2 (host 2, entered 0)", 0), 0u);  // odd ranks arrived: 2, 4, ... 32
  EXPECT_NE(m.find(" rank 32 (host 32, entered 0)"), std::string::npos);
  EXPECT_EQ(m.find(" rank 34 "), std::string::npos);
}

TEST(BarrierTracker, RejectsALayoutWithoutThisRank) {
  HostLayout L = layout(0, 2, 1);
  L.rank = 5;
  FakeTransport t(0, 2);
  EXPECT_THROW(BarrierTracker(L, nullptr, 0, t), InternalError);
}
