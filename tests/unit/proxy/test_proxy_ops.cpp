// Each op end to end over loopback (CPU producers -> rings -> proxies -> transport -> engine ->
// counters), with and without the ordering engine, and each failure case ending in a clear error.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "cluster_waits.h"
#include "common/error.h"
#include "testkit/local_cluster.h"
#include "transport/forwarding_transport.h"

using namespace anyep;
using namespace anyep::channel;
using namespace anyep::proxy;
using namespace anyep::testkit;

namespace {

LocalClusterConfig small(uint32_t ranks, int ordering, uint64_t timeout_ms = 20000) {
  LocalClusterConfig c;
  c.ranks = ranks;
  c.threads = 2;
  c.rings = 2;
  c.buffer_bytes = 1 << 16;
  c.num_counters = 16;
  c.proxy.ordering = static_cast<Ordering>(ordering);
  c.proxy.num_tags = 16;
  c.proxy.timeout_ns = timeout_ms * 1000000ull;
  c.proxy.ranks_per_node = 1;  // every rank its own host: flat barriers (test_host_barrier covers hosts)
  return c;
}

class ProxyOps : public ::testing::TestWithParam<int> {};

}  // namespace

TEST_P(ProxyOps, WriteThenCountSignalDeliversDataFirst) {
  LocalCluster cl(small(2, GetParam()));
  EXPECT_EQ(cl.rank(0).proxy->bypass(), GetParam() == static_cast<int>(Ordering::kAuto));
  cl.start();
  uint8_t* src = cl.rank(0).bytes();
  for (int i = 0; i < 1024; ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  RingHandle h = cl.rank(0).channel->producer(1);
  for (int t = 0; t < 4; ++t) ASSERT_NE(h.push(make_write(1, t * 256, 4096 + t * 256, 256, 3)), kPushFailed);
  ASSERT_NE(h.push(make_signal(1, 5, 1, cmd::kFenceCount, 3, 4)), kPushFailed);
  ASSERT_EQ(wait_counter(&cl.rank(1).counters[5], 1), 1u);
  EXPECT_EQ(std::memcmp(cl.rank(1).bytes() + 4096, src, 1024), 0);
  cl.check();
}

TEST_P(ProxyOps, PiggybackedPlusOneAndOrderedSignal) {
  LocalCluster cl(small(2, GetParam()));
  cl.start();
  std::memset(cl.rank(1).bytes(), 0xab, 512);
  RingHandle h = cl.rank(1).channel->producer(0);
  ASSERT_NE(h.push(make_write(0, 0, 8192, 512, 2, /*signal=*/true)), kPushFailed);
  ASSERT_NE(h.push(make_write(0, 0, 8192 + 512, 512, 6)), kPushFailed);
  ASSERT_NE(h.push(make_signal(0, 7, 1, cmd::kFenceOrdered, 6)), kPushFailed);
  EXPECT_EQ(wait_counter(&cl.rank(0).counters[2], 1), 1u);
  EXPECT_EQ(wait_counter(&cl.rank(0).counters[7], 1), 1u);
  EXPECT_EQ(cl.rank(0).bytes()[8192 + 1023], 0xab);
  cl.check();
}

TEST_P(ProxyOps, QuietRetiresOnlyAfterEarlierWritesCompleted) {
  LocalCluster cl(small(2, GetParam()));
  cl.start();
  std::memset(cl.rank(0).bytes(), 0x5a, 8192);
  RingHandle h = cl.rank(0).channel->producer(0);
  for (int i = 0; i < 8; ++i) ASSERT_NE(h.push(make_write(1, i * 1024, 16384 + i * 1024, 1024)), kPushFailed);
  const uint64_t q = h.push(make_quiet(cmd::kAllPeers, 0b11));  // rings 0 and 1... ring 1 is thread 1's
  ASSERT_NE(q, kPushFailed);
  // Ring 1 belongs to proxy thread 1: naming it from ring 0 is rejected with a clear error.
  EXPECT_NE(wait_error(cl).find("QUIET names ring 1, which proxy thread 0 does not own"), std::string::npos);
  const uint64_t q2 = h.push(make_quiet());
  ASSERT_TRUE(h.wait_done(q2));
  for (int i = 0; i < 8192; ++i) ASSERT_EQ(cl.rank(1).bytes()[16384 + i], 0x5a) << i;
}

TEST_P(ProxyOps, BarrierReleasesOnlyAfterEveryRankEntered) {
  const uint32_t R = 4;
  LocalCluster cl(small(R, GetParam()));
  cl.start();
  std::atomic<uint32_t> entered{0};
  std::vector<std::thread> th;
  std::atomic<int> bad{0};
  for (uint32_t r = 0; r < R; ++r)
    th.emplace_back([&, r] {
      for (uint64_t epoch = 1; epoch <= 20; ++epoch) {
        std::this_thread::sleep_for(std::chrono::microseconds(200 * ((r * 7 + epoch) % 5)));
        entered.fetch_add(1);
        RingHandle h = cl.rank(r).channel->producer(0);
        const uint64_t i = h.push(make_barrier(epoch % 2 == 0, epoch));
        if (i == kPushFailed || !h.wait_done(i)) {
          bad.fetch_add(100);
          return;
        }
        if (entered.load() < epoch * R) bad.fetch_add(1);  // released before everyone entered
      }
    });
  for (auto& t : th) t.join();
  EXPECT_EQ(bad.load(), 0);
  cl.check();
}

INSTANTIATE_TEST_SUITE_P(Ordering, ProxyOps,
                         ::testing::Values(static_cast<int>(Ordering::kAuto), static_cast<int>(Ordering::kEngine)),
                         [](const auto& i) { return i.param == 0 ? std::string("bypass") : std::string("engine"); });

// ---- failure cases: each ends in an error naming what was wrong, within the timeout -------------

TEST(ProxyFailures, CorruptedCommand) {
  LocalCluster cl(small(2, 1));
  cl.start();
  RingHandle h = cl.rank(0).channel->producer(0);
  TransferCmd bad;
  bad.lo = 9;  // op 9 does not exist
  ASSERT_NE(h.push(bad), kPushFailed);
  const std::string e = wait_error(cl);
  EXPECT_NE(e.find("rank 0 proxy thread 0 ring 0 index 0"), std::string::npos) << e;
  EXPECT_NE(e.find("corrupted command: op 9"), std::string::npos) << e;
}

TEST(ProxyFailures, OutOfRangeOffsetNeverReachesTheTransport) {
  LocalCluster cl(small(2, 1));
  cl.start();
  RingHandle h = cl.rank(0).channel->producer(0);
  ASSERT_NE(h.push(make_write(1, 0, (1 << 16) - 256, 512)), kPushFailed);  // runs past the 64 KiB buffer
  const std::string e = wait_error(cl);
  EXPECT_NE(e.find("WRITE destination [65280, +512) on rank 1 is outside the symmetric memory"), std::string::npos)
      << e;
  EXPECT_EQ(cl.rank(0).proxy->stats().writes, 0u);
  // The error stays raised, with its class: a bad command is the caller's invalid argument.
  EXPECT_THROW(cl.check(), InvalidArgument);
}

TEST(ProxyFailures, MissingPeer) {
  LocalCluster cl(small(2, 1));
  cl.start();
  RingHandle h = cl.rank(1).channel->producer(0);
  ASSERT_NE(h.push(make_signal(7, 0, 1)), kPushFailed);
  const std::string e = wait_error(cl);
  EXPECT_NE(e.find("SIGNAL to rank 7, but there are only 2 ranks (missing peer)"), std::string::npos) << e;
}

TEST(ProxyFailures, WritesThatNeverArriveTimeOut) {
  LocalCluster cl(small(2, static_cast<int>(Ordering::kEngine), 300));
  cl.start();
  RingHandle h = cl.rank(0).channel->producer(0);
  ASSERT_NE(h.push(make_write(1, 0, 0, 64, 4)), kPushFailed);
  ASSERT_NE(h.push(make_write(1, 0, 64, 64, 4)), kPushFailed);
  ASSERT_NE(h.push(make_signal(1, 3, 1, cmd::kFenceCount, 4, 5)), kPushFailed);  // claims 5 writes
  const auto t0 = std::chrono::steady_clock::now();
  const std::string e = wait_error(cl, 10);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
  EXPECT_NE(e.find("peer 0 for tag (LL expert / HT channel) 4"), std::string::npos) << e;
  EXPECT_NE(e.find("3 of its 5 writes never arrived"), std::string::npos) << e;
  EXPECT_LT(s, 5.0);
  EXPECT_EQ(cl.rank(1).counters[3], 0u) << "the signal was never applied";
}

TEST(ProxyFailures, BarrierWithAnAbsentRankTimesOutNamingIt) {
  LocalCluster cl(small(3, 1, 300));
  cl.start();
  RingHandle h0 = cl.rank(0).channel->producer(0), h1 = cl.rank(1).channel->producer(0);
  ASSERT_NE(h0.push(make_barrier(false, 1)), kPushFailed);
  ASSERT_NE(h1.push(make_barrier(false, 1)), kPushFailed);  // rank 2 never enters
  const std::string e = wait_error(cl, 10);
  EXPECT_NE(e.find("BARRIER #1 (epoch 1) waited more than 300 ms; not entered by: rank 2 (host 2, entered 0)"),
            std::string::npos)
      << e;
}

// A transport whose writes land but never report local completion: QUIET must end in an error
// naming the ring and how many operations were incomplete, not hang.
class NoCompletions final : public transport::ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  int poll(transport::Completion* c, size_t mc, size_t* nc, transport::ImmEvent* i, size_t mi, size_t* ni) override {
    const int rc = inner_->poll(c, mc, nc, i, mi, ni);
    *nc = 0;  // completions are swallowed
    return rc;
  }
};

TEST(ProxyFailures, QuietWhoseWritesNeverCompleteTimesOut) {
  LocalClusterConfig c = small(2, 1, 300);
  auto inner = loopback_factory(2, c.threads);
  c.endpoints = [inner](uint32_t r, uint32_t t) { return std::make_unique<NoCompletions>(inner(r, t)); };
  LocalCluster cl(c);
  cl.start();
  RingHandle h = cl.rank(0).channel->producer(1);
  ASSERT_NE(h.push(make_write(1, 0, 0, 64)), kPushFailed);
  const uint64_t q = h.push(make_quiet());
  const std::string e = wait_error(cl, 10);
  EXPECT_NE(e.find("rank 0 proxy thread 1 ring 1 index 1: QUIET waited more than 300 ms for remote completion of "
                   "earlier commands: ring 1: 1 not complete"),
            std::string::npos)
      << e;
  EXPECT_FALSE(h.done(q));
}

TEST(ProxyFailures, SetupRejectsAsymmetricRegions) {
  InProcessGroup g(2, 5);
  auto fab = loopback_factory(2, 1);
  std::vector<uint64_t> counters(4), b0(64), b1(128);
  Channel c0({.num_rings = 1}), c1({.num_rings = 1});
  std::string err0, err1;
  auto build = [&](uint32_t r, Channel& ch, std::vector<uint64_t>& buf, std::string& err) {
    try {
      ProxyConfig pc;
      pc.counters = counters.data();
      pc.num_counters = 4;
      std::vector<std::unique_ptr<transport::Transport>> eps;
      eps.push_back(fab(r, 0));
      auto boot = g.member(r);
      Proxy p(pc, ch, std::move(eps), {{"buffer", buf.data(), buf.size() * 8}}, *boot);
    } catch (const Error& e) {
      err = e.what();
    }
  };
  std::thread t([&] { build(1, c1, b1, err1); });
  build(0, c0, b0, err0);
  t.join();
  EXPECT_NE(err0.find("region 'buffer' is 1024 bytes on rank 1 but 512 here"), std::string::npos) << err0;
}
