// Hierarchical BARRIER (shared memory within a host, leaders across hosts) with ranks as threads
// of one process split into emulated hosts: release only after every rank entered, repeated
// barriers, the rail subset, a rank that never arrives, mismatched epochs, no leftover names.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

#include "common/error.h"
#include "testkit/local_cluster.h"

using namespace anyep;
using namespace anyep::channel;
using namespace anyep::proxy;
using namespace anyep::testkit;

namespace {

LocalClusterConfig cluster(uint32_t ranks, uint32_t per_host, uint64_t timeout_ms = 20000) {
  LocalClusterConfig c;
  c.ranks = ranks;
  c.threads = 2;
  c.rings = 2;
  c.buffer_bytes = 1 << 12;
  c.num_counters = 4;
  c.proxy.num_tags = 4;
  c.proxy.timeout_ns = timeout_ms * 1000000ull;
  if (per_host) c.proxy.ranks_per_node = per_host;  // 0: detect
  return c;
}

// Waits until rank r's proxy recorded an error; returns its message ("" if none in time).
std::string wait_rank_error(LocalCluster& cl, uint32_t r, double seconds = 10) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (cl.rank(r).proxy->error().is_set()) return cl.rank(r).proxy->error().message();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return "";
}

// Every rank runs `rounds` barriers on `ring` (rail: only its rail's members count). Before
// entering barrier k a rank bumps entered[k] of its group; after leaving, the group's count must
// be complete, else some rank left before the last one arrived.
void run_barriers(LocalCluster& cl, uint32_t rounds, bool rail, uint32_t ring) {
  const uint32_t R = cl.size();
  const HostLayout& L = cl.rank(0).proxy->hosts();
  uint32_t groups = 1;
  for (uint32_t r = 0; r < R; ++r) groups = std::max(groups, rail ? L.local_index[r] + 1 : 1u);
  std::vector<uint32_t> members(groups, 0);
  for (uint32_t r = 0; r < R; ++r) ++members[rail ? L.local_index[r] : 0];
  std::vector<std::atomic<uint32_t>> entered(static_cast<size_t>(groups) * (rounds + 1));
  std::atomic<int> early{0}, failed{0};
  std::vector<std::thread> th;
  for (uint32_t r = 0; r < R; ++r)
    th.emplace_back([&, r] {
      const uint32_t g = rail ? L.local_index[r] : 0;
      RingHandle h = cl.rank(r).channel->producer(ring);
      for (uint32_t k = 1; k <= rounds; ++k) {
        // Stagger arrivals so a barrier that released early would be caught.
        std::this_thread::sleep_for(std::chrono::microseconds(100 * ((r * 5 + k) % 4)));
        entered[g * (rounds + 1) + k].fetch_add(1);
        const uint64_t i = h.push(make_barrier(rail, 1000 + k));
        if (i == kPushFailed || !h.wait_done(i)) {
          failed.fetch_add(1);
          return;
        }
        if (entered[g * (rounds + 1) + k].load() != members[g]) early.fetch_add(1);
      }
    });
  for (auto& t : th) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(early.load(), 0) << "a rank left a barrier before every member entered it";
  cl.check();
}

class HostBarrier : public ::testing::TestWithParam<uint32_t> {};

}  // namespace

TEST(HostBarrierLayout, EmulatedHostsAndLeaders) {
  LocalCluster cl(cluster(5, 2));
  const HostLayout& L = cl.rank(3).proxy->hosts();
  EXPECT_EQ(L.num_hosts, 3u);
  EXPECT_EQ(L.host, 1u);
  EXPECT_EQ(L.local_ranks, (std::vector<uint32_t>{2, 3}));
  EXPECT_EQ(L.leader_of_host, (std::vector<uint32_t>{0, 2, 4}));
  EXPECT_EQ(L.local_index, (std::vector<uint32_t>{0, 1, 0, 1, 0}));
  EXPECT_FALSE(L.leader());
  EXPECT_TRUE(cl.rank(2).proxy->hosts().leader());
  // Hosts of two ranks share a segment; the last host has one rank and needs none.
  ASSERT_NE(cl.rank(3).proxy->host_shm(), nullptr);
  EXPECT_EQ(cl.rank(2).proxy->host_shm(), cl.rank(3).proxy->host_shm()) << "threads of one process share the mapping";
  EXPECT_EQ(cl.rank(4).proxy->host_shm(), nullptr);
  // The names were unlinked at setup: nothing is left in /dev/shm.
  for (uint32_t r : {0u, 2u}) {
    const int fd = shm_open(cl.rank(r).proxy->host_shm()->name().c_str(), O_RDWR, 0);
    EXPECT_EQ(fd, -1) << cl.rank(r).proxy->host_shm()->name() << " still exists";
    EXPECT_EQ(errno, ENOENT);
  }
}

TEST(HostBarrierLayout, DetectedHostPutsEveryThreadRankOnOneHost) {
  LocalCluster cl(cluster(3, 0));
  EXPECT_EQ(cl.rank(1).proxy->hosts().num_hosts, 1u);
  EXPECT_EQ(cl.rank(1).proxy->hosts().local_index[2], 2u);
  cl.start();
  run_barriers(cl, 10, false, 0);
}

TEST_P(HostBarrier, ReleasesOnlyAfterEveryRankEnteredRepeatedly) {
  LocalCluster cl(cluster(6, GetParam()));
  cl.start();
  run_barriers(cl, 40, false, 0);
  run_barriers(cl, 10, false, 1);  // thread 1's words and endpoint
}

TEST_P(HostBarrier, RailSubsetIsTheSameIndexOnEveryHost) {
  LocalCluster cl(cluster(6, GetParam()));
  cl.start();
  run_barriers(cl, 20, true, 0);
  run_barriers(cl, 10, false, 0);  // all-rank barriers after rail ones keep their own count
}

INSTANTIATE_TEST_SUITE_P(RanksPerHost, HostBarrier, ::testing::Values(1u, 2u, 3u, 6u),
                         [](const auto& i) { return std::to_string(i.param) + "_per_host"; });

TEST(HostBarrierFailures, RankThatNeverArrivesIsNamedWithItsHost) {
  LocalCluster cl(cluster(4, 2, 300));
  cl.start();
  for (uint32_t r = 0; r < 3; ++r)  // rank 3 (host 1) never enters
    ASSERT_NE(cl.rank(r).channel->producer(0).push(make_barrier(false, 5)), kPushFailed);
  const std::string leader1 = wait_rank_error(cl, 2);  // its own host's leader sees it in shared memory
  EXPECT_NE(leader1.find("BARRIER #1 (epoch 5) waited more than 300 ms; not entered by: rank 3 (host 1, entered 0)"),
            std::string::npos)
      << leader1;
  const std::string leader0 = wait_rank_error(cl, 0);  // the other host's leader sees host 1 missing
  EXPECT_NE(leader0.find("not entered by: host 1 (its leader rank 2 entered 0)"), std::string::npos) << leader0;
  const std::string member0 = wait_rank_error(cl, 1);
  EXPECT_NE(member0.find("every rank of host 0 entered; its leader rank 0 waits"), std::string::npos) << member0;
  EXPECT_THROW(cl.check(), TimeoutError);
}

TEST(HostBarrierFailures, MissingLeaderIsNamedByItsHost) {
  LocalCluster cl(cluster(4, 2, 300));
  cl.start();
  for (uint32_t r : {1u, 2u, 3u}) ASSERT_NE(cl.rank(r).channel->producer(0).push(make_barrier(false, 1)), kPushFailed);
  const std::string e = wait_rank_error(cl, 1);
  EXPECT_NE(e.find("not entered by: rank 0 (host 0, entered 0)"), std::string::npos) << e;
}

TEST(HostBarrierFailures, MismatchedEpochWithinAHost) {
  LocalCluster cl(cluster(4, 2));
  cl.start();
  for (uint32_t r = 0; r < 4; ++r)
    ASSERT_NE(cl.rank(r).channel->producer(0).push(make_barrier(false, r == 1 ? 7 : 1)), kPushFailed);
  const std::string e = wait_rank_error(cl, 0);
  EXPECT_NE(e.find("BARRIER #1: rank 1 (host 0) entered it with epoch 7 but this rank with epoch 1"), std::string::npos)
      << e;
}

TEST(HostBarrierFailures, MismatchedEpochAcrossHosts) {
  LocalCluster cl(cluster(4, 2));
  cl.start();
  for (uint32_t r = 0; r < 4; ++r)
    ASSERT_NE(cl.rank(r).channel->producer(0).push(make_barrier(false, r < 2 ? 1 : 9)), kPushFailed);
  const std::string e = wait_rank_error(cl, 0);
  EXPECT_NE(e.find("BARRIER #1: rank 2 (host 1) entered it with epoch 9 but this rank with epoch 1"), std::string::npos)
      << e;
}

TEST(HostBarrierFailures, RanksDisagreeOnTheLayout) {
  // ranks_per_node differs between ranks: every rank's setup fails with the reason.
  InProcessGroup group(2, 10);
  std::vector<std::string> errs(2);
  std::vector<std::thread> th;
  for (uint32_t r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      try {
        auto boot = group.member(r);
        setup_hosts(*boot, r + 1, 1);
      } catch (const InvalidArgument& e) {
        errs[r] = e.what();
      }
    });
  for (auto& t : th) t.join();
  EXPECT_NE(errs[0].find("ranks per host is 2 on rank 1 but 1 here"), std::string::npos) << errs[0];
  EXPECT_NE(errs[1].find("ranks per host is 1 on rank 0 but 2 here"), std::string::npos) << errs[1];
}
