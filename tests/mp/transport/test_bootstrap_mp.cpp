// TCP bootstrap between real processes: allgather shape and contents, barrier, and a rank that
// never joins (rank 0's error names it; the harness's own timeout is not what ends the test).
#include <gtest/gtest.h>

#include "common/error.h"
#include "testkit/mp_harness.h"

namespace anyep {
namespace {

TEST(TcpBootstrapMp, AllgatherOfDifferentSizesReachesEveryRank) {
  for (uint32_t n : {1u, 2u, 4u, 8u}) {
    auto res = testkit::run_ranks(n, [](testkit::Rank& r) {
      for (int round = 0; round < 3; ++round) {
        std::vector<uint8_t> mine(r.rank * 1000 + round, static_cast<uint8_t>(r.rank + round));
        auto all = r.boot->allgather(mine);
        ANYEP_MP_CHECK(all.size() == r.size, "allgather returned " + std::to_string(all.size()));
        for (uint32_t k = 0; k < r.size; ++k) {
          ANYEP_MP_CHECK(all[k].size() == k * 1000 + round, "entry " + std::to_string(k) + " has wrong size");
          for (uint8_t b : all[k]) ANYEP_MP_CHECK(b == static_cast<uint8_t>(k + round), "entry content");
        }
        r.boot->barrier();
      }
    });
    EXPECT_TRUE(res.ok()) << "n=" << n << "\n" << res.summary();
  }
}

TEST(TcpBootstrapMp, PeerThatNeverJoinsIsNamedByRankZero) {
  testkit::RunOptions opt;
  opt.bootstrap = false;
  opt.timeout_s = 20;
  auto res = testkit::run_ranks(4, [](testkit::Rank& r) {
    if (r.rank == 2) return;  // never joins
    try {
      auto b = r.join(1.5);
      b->barrier();
    } catch (const TimeoutError& e) {
      std::string m = e.what();
      if (r.rank == 0) ANYEP_MP_CHECK(m.find("rank(s) 2 of 4 never joined") != std::string::npos, m);
      return;  // other ranks time out waiting on rank 0: fine, as long as it is a TimeoutError
    } catch (const TransportError&) {
      ANYEP_MP_CHECK(r.rank != 0, "rank 0 must report a timeout naming the missing rank");
      return;  // rank 0 gave up and closed the socket: the others see the connection drop
    }
    throw std::runtime_error("bootstrap with a missing rank did not fail");
  }, opt);
  EXPECT_TRUE(res.ok()) << res.summary();
}

TEST(TcpBootstrapMp, NoRankZeroIsATimeoutForTheOthers) {
  testkit::RunOptions opt;
  opt.bootstrap = false;
  auto res = testkit::run_ranks(2, [](testkit::Rank& r) {
    if (r.rank == 0) return;
    try {
      r.join(0.5);
    } catch (const TimeoutError& e) {
      std::string m = e.what();
      ANYEP_MP_CHECK(m.find("could not reach rank 0") != std::string::npos, m);
      return;
    }
    throw std::runtime_error("joining with no rank 0 did not fail");
  }, opt);
  EXPECT_TRUE(res.ok()) << res.summary();
}

TEST(MpHarness, ReportsFailuresSkipsAndStragglersByRank) {
  testkit::RunOptions opt;
  opt.timeout_s = 3;
  opt.bootstrap = false;
  auto res = testkit::run_ranks(4, [](testkit::Rank& r) {
    if (r.rank == 1) throw std::runtime_error("boom on one");
    if (r.rank == 2) throw testkit::Skip("no such provider");
    if (r.rank == 3) ::pause();  // straggler
  }, opt);
  ASSERT_EQ(res.ranks.size(), 4u);
  EXPECT_EQ(res.ranks[0].status, testkit::RankOutcome::Status::kOk);
  EXPECT_EQ(res.ranks[1].status, testkit::RankOutcome::Status::kFailed);
  EXPECT_EQ(res.ranks[1].message, "boom on one");
  EXPECT_EQ(res.ranks[2].status, testkit::RankOutcome::Status::kSkipped);
  EXPECT_EQ(res.ranks[3].status, testkit::RankOutcome::Status::kKilled);
  EXPECT_FALSE(res.ok());
  EXPECT_FALSE(res.skipped());
  EXPECT_NE(res.summary().find("rank 3 KILLED"), std::string::npos) << res.summary();
}

}  // namespace
}  // namespace anyep
