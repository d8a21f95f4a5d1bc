// TCP bootstrap between real processes: allgather shape and contents, barrier, and a rank that
// never joins (rank 0's error names it; the harness's own timeout is not what ends the test).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

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
  auto res = testkit::run_ranks(
      4,
      [](testkit::Rank& r) {
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
      },
      opt);
  EXPECT_TRUE(res.ok()) << res.summary();
}

TEST(TcpBootstrapMp, NoRankZeroIsATimeoutForTheOthers) {
  testkit::RunOptions opt;
  opt.bootstrap = false;
  auto res = testkit::run_ranks(
      2,
      [](testkit::Rank& r) {
        if (r.rank == 0) return;
        try {
          r.join(0.5);
        } catch (const TimeoutError& e) {
          std::string m = e.what();
          // Rank 0's socket is bound before any rank starts, so a joiner may connect to it while it
          // still exists (refused once it is closed): either way a timeout that names rank 0.
          ANYEP_MP_CHECK(m.find("could not reach rank 0") != std::string::npos ||
                             m.find("(hello sent, no answer) from rank 0: timed out") != std::string::npos,
                         m);
          return;
        }
        throw std::runtime_error("joining with no rank 0 did not fail");
      },
      opt);
  EXPECT_TRUE(res.ok()) << res.summary();
}

TEST(MpHarness, ReportsFailuresSkipsAndStragglersByRank) {
  testkit::RunOptions opt;
  opt.timeout_s = 3;
  opt.bootstrap = false;
  auto res = testkit::run_ranks(
      4,
      [](testkit::Rank& r) {
        if (r.rank == 1) throw std::runtime_error("boom on one");
        if (r.rank == 2) throw testkit::Skip("no such provider");
        if (r.rank == 3) ::pause();  // straggler
      },
      opt);
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

// A rank killed by a signal is the culprit, named by rank and signal at once; the others are
// killed after the grace period (not after the run's timeout) and their reports name the culprit.
TEST(MpHarness, RankKilledBySignalIsNamedAndTheOthersAreEnded) {
  testkit::RunOptions opt;
  opt.bootstrap = false;
  opt.timeout_s = 60;
  opt.kill_grace_s = 0.5;
  const auto t0 = std::chrono::steady_clock::now();
  auto res = testkit::run_ranks(
      4,
      [](testkit::Rank& r) {
        if (r.rank == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          ::raise(SIGKILL);
        }
        ::pause();
      },
      opt);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0) << res.summary();
  EXPECT_EQ(res.culprit, 2) << res.summary();
  EXPECT_NE(res.culprit_message.find("rank 2"), std::string::npos) << res.culprit_message;
  EXPECT_NE(res.culprit_message.find("SIGKILL"), std::string::npos) << res.culprit_message;
  EXPECT_EQ(res.ranks[2].status, testkit::RankOutcome::Status::kCrashed);
  for (uint32_t r : {0u, 1u, 3u}) {
    EXPECT_EQ(res.ranks[r].status, testkit::RankOutcome::Status::kKilled) << r;
    EXPECT_NE(res.ranks[r].message.find("after rank 2"), std::string::npos) << res.ranks[r].message;
  }
  for (const auto& o : res.ranks) EXPECT_NE(::kill(o.pid, 0), 0) << "rank " << o.rank << " still exists";
}

// A stopped rank (kill -STOP) stops its heartbeat: reported as stopped within the liveness bound.
TEST(MpHarness, StoppedRankIsNamedWithinTheLivenessBound) {
  testkit::RunOptions opt;
  opt.bootstrap = false;
  opt.timeout_s = 60;
  opt.liveness_s = 1;
  opt.kill_grace_s = 0.2;
  const auto t0 = std::chrono::steady_clock::now();
  auto res = testkit::run_ranks(
      3,
      [](testkit::Rank& r) {
        if (r.rank == 1) ::raise(SIGSTOP);
        ::pause();
      },
      opt);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 8.0) << res.summary();
  EXPECT_EQ(res.culprit, 1) << res.summary();
  EXPECT_EQ(res.ranks[1].status, testkit::RankOutcome::Status::kStalled);
  EXPECT_NE(res.culprit_message.find("stopped responding"), std::string::npos) << res.culprit_message;
  EXPECT_NE(res.culprit_message.find("T (stopped)"), std::string::npos) << res.culprit_message;
}

// A rank's result is handed back whatever its size (more than a pipe holds).
TEST(MpHarness, ResultsLargerThanAPipeComeBack) {
  testkit::RunOptions opt;
  opt.bootstrap = false;
  auto res = testkit::run_ranks(
      2, [](testkit::Rank& r) { r.result.assign(1 << 20, static_cast<char>('a' + r.rank)); }, opt);
  ASSERT_TRUE(res.ok()) << res.summary();
  for (uint32_t r = 0; r < 2; ++r) EXPECT_EQ(res.ranks[r].result, std::string(1 << 20, static_cast<char>('a' + r)));
}

// With kill_all_on_failure, one failing rank ends the run and names itself as the culprit.
TEST(MpHarness, KillAllOnFailureEndsTheRunAfterTheFirstFailure) {
  testkit::RunOptions opt;
  opt.bootstrap = false;
  opt.timeout_s = 60;
  opt.kill_all_on_failure = true;
  opt.kill_grace_s = 0.2;
  auto res = testkit::run_ranks(
      3,
      [](testkit::Rank& r) {
        if (r.rank == 0) throw std::runtime_error("data check failed");
        ::pause();
      },
      opt);
  EXPECT_EQ(res.culprit, 0) << res.summary();
  EXPECT_NE(res.culprit_message.find("data check failed"), std::string::npos) << res.culprit_message;
  EXPECT_EQ(res.ranks[1].status, testkit::RankOutcome::Status::kKilled);
}

// The parent's death takes the ranks with it (PR_SET_PDEATHSIG): no orphans.
TEST(MpHarness, RanksDieWithTheirParent) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  pid_t mid = ::fork();
  if (mid == 0) {  // a stand-in parent: starts two ranks that report their pids, then dies
    ::close(p[0]);
    testkit::RunOptions opt;
    opt.bootstrap = false;
    opt.on_started = [&](const std::vector<pid_t>& pids) {
      (void)!::write(p[1], pids.data(), pids.size() * sizeof(pid_t));
      ::_exit(0);
    };
    testkit::run_ranks(
        2, [](testkit::Rank&) { ::pause(); }, opt);
    ::_exit(1);
  }
  ::close(p[1]);
  pid_t pids[2] = {0, 0};
  ASSERT_EQ(::read(p[0], pids, sizeof pids), static_cast<ssize_t>(sizeof pids));
  ::close(p[0]);
  ::waitpid(mid, nullptr, 0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  bool gone = false;
  while (!gone && std::chrono::steady_clock::now() < until) {
    gone = ::kill(pids[0], 0) != 0 && ::kill(pids[1], 0) != 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "ranks " << pids[0] << ", " << pids[1] << " outlived their parent";
}

}  // namespace
}  // namespace anyep
