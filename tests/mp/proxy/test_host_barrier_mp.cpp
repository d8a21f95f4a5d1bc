// Hierarchical BARRIER across processes: ranks are processes (libfabric tcp between host leaders,
// POSIX shared memory within an emulated or the real host). Each rank stamps CLOCK_MONOTONIC
// (one clock for every process of the machine) when it enters and leaves each barrier; no rank
// may leave barrier k before the last rank entered it. A rank that never arrives ends in a timeout
// naming it and its host.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "../provider_required.h"
#include "common/error.h"
#include "proxy/proxy.h"
#include "testkit/mp_harness.h"
#include "testkit/tsan_transport.h"
#include "transport/factory.h"

using namespace anyep;
using namespace anyep::channel;
using namespace anyep::proxy;
using namespace anyep::testkit;

namespace {

uint64_t mono_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// One rank's proxy over libfabric tcp, T threads, one ring per thread.
struct BarrierRank {
  std::vector<uint64_t> buffer = std::vector<uint64_t>(512), counters = std::vector<uint64_t>(4);
  std::unique_ptr<Channel> channel;
  std::unique_ptr<Proxy> proxy;

  BarrierRank(testkit::Rank& r, uint32_t per_host, uint64_t timeout_ms) {
    ChannelConfig cc;
    cc.num_rings = 2;
    cc.capacity = 64;
    channel = std::make_unique<Channel>(cc);
    std::vector<std::unique_ptr<transport::Transport>> eps;
    transport::TransportSpec spec;
    spec.name = "tcp";
    spec.rank = r.rank;
    spec.num_ranks = r.size;
    for (uint32_t t = 0; t < 2; ++t) eps.push_back(transport::make_transport(spec));
    ProxyConfig pc;
    pc.counters = counters.data();
    pc.num_counters = 4;
    pc.num_tags = 4;
    pc.timeout_ns = timeout_ms * 1000000ull;
    if (per_host) pc.ranks_per_node = per_host;  // 0: detect
    proxy = std::make_unique<Proxy>(pc, *channel, std::move(eps),
                                    std::vector<Region>{{"buffer", buffer.data(), buffer.size() * 8}}, *r.boot);
    proxy->start();
  }
};

void require_tcp() {
  ::setenv("FI_TCP_IFACE", "lo", 0);
  std::string why;
  const bool ok = transport::available("tcp", &why);
  mptest::require_in_rank<testkit::Skip>(ok, "tcp", why);
}

struct Case {
  uint32_t ranks, per_host;  // per_host 0: detected (every process on this one machine)
};
class HostBarrierMp : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(HostBarrierMp, NoRankLeavesBeforeTheLastEntered) {
  const Case c = GetParam();
  testkit::RunOptions opt;
  // Six TSan-instrumented processes on a loaded 2-core machine took over 60 s once (load 16);
  // uninstrumented, the run takes about 11 s.
  opt.timeout_s = testkit::tsan_build() ? 240 : 60;
  auto res = testkit::run_ranks(
      c.ranks,
      [&](testkit::Rank& r) {
        require_tcp();
        BarrierRank b(r, c.per_host, 20000);
        const HostLayout& L = b.proxy->hosts();
        ANYEP_MP_CHECK(L.num_hosts == (c.per_host ? (c.ranks + c.per_host - 1) / c.per_host : 1), "host count");
        ANYEP_MP_CHECK((b.proxy->host_shm() != nullptr) == (L.local_size() > 1),
                       "shared memory iff several local ranks");
        constexpr uint32_t kRounds = 30;
        // [round][enter, leave]; rounds alternate all-rank and rail barriers on both threads' rings.
        std::vector<uint64_t> stamps(2 * kRounds);
        for (uint32_t k = 0; k < kRounds; ++k) {
          std::this_thread::sleep_for(std::chrono::microseconds(300 * ((r.rank * 3 + k) % 4)));
          const bool rail = k % 3 == 2;
          RingHandle h = b.channel->producer(k % 2);
          stamps[2 * k] = mono_ns();
          const uint64_t i = h.push(make_barrier(rail, 100 + k));
          ANYEP_MP_CHECK(i != kPushFailed, "push barrier");
          if (!h.wait_done(i)) b.proxy->check();
          ANYEP_MP_CHECK(h.done(i), "barrier " + std::to_string(k) + " did not complete");
          stamps[2 * k + 1] = mono_ns();
        }
        b.proxy->check();
        std::vector<uint8_t> mine(stamps.size() * 8);
        std::memcpy(mine.data(), stamps.data(), mine.size());
        const auto all = r.boot->allgather(mine);
        for (uint32_t k = 0; k < kRounds; ++k) {
          const bool rail = k % 3 == 2;
          uint64_t last_enter = 0, first_leave = ~0ull;
          for (uint32_t p = 0; p < r.size; ++p) {
            if (rail && L.local_index[p] != L.local_index[r.rank]) continue;
            uint64_t e, l;
            std::memcpy(&e, &all[p][16 * k], 8);
            std::memcpy(&l, &all[p][16 * k + 8], 8);
            last_enter = std::max(last_enter, e);
            first_leave = std::min(first_leave, l);
          }
          ANYEP_MP_CHECK(first_leave >= last_enter, "barrier " + std::to_string(k) + ": a member left " +
                                                        std::to_string(last_enter - first_leave) +
                                                        " ns before the last member entered");
        }
        b.proxy->stop();
      },
      opt);
  ANYEP_EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Hosts, HostBarrierMp, ::testing::Values(Case{4, 2}, Case{4, 0}, Case{6, 3}),
                         [](const auto& i) {
                           return std::to_string(i.param.ranks) + "ranks_" +
                                  (i.param.per_host ? std::to_string(i.param.per_host) + "_per_host" : "detected");
                         });

TEST(HostBarrierMpFailures, RankThatNeverArrivesTimesOutNamingItAndItsHost) {
  testkit::RunOptions opt;
  opt.timeout_s = 60;
  auto res = testkit::run_ranks(
      4,
      [&](testkit::Rank& r) {
        require_tcp();
        BarrierRank b(r, 2, 400);
        if (r.rank != 3) {  // rank 3 (host 1) never enters
          RingHandle h = b.channel->producer(0);
          ANYEP_MP_CHECK(h.push(make_barrier(false, 1)) != kPushFailed, "push barrier");
          const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (!b.proxy->error().is_set() && std::chrono::steady_clock::now() < end)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          const std::string e = b.proxy->error().message();
          const char* want = r.rank == 2   ? "not entered by: rank 3 (host 1, entered 0)"
                             : r.rank == 0 ? "not entered by: host 1 (its leader rank 2 entered 0)"
                                           : "every rank of host 0 entered; its leader rank 0 waits";
          ANYEP_MP_CHECK(e.find(want) != std::string::npos, "rank " + std::to_string(r.rank) + " error: '" + e + "'");
          ANYEP_MP_CHECK(b.proxy->error().status() == ANYEP_ERR_TIMEOUT, "a timeout");
        }
        r.boot->barrier();  // rank 3 stays up until the others saw their errors
        b.proxy->stop();
      },
      opt);
  ANYEP_EXPECT_RANKS_OK(res);
}
