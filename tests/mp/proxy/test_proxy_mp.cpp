// The randomized stream workload (testkit/workload.h) across 2-8 processes over libfabric tcp and
// shm (plain and wrapped in chaos), every rank its own process with its own proxy, with signals
// emulated (records applied by the receiving proxy) and as native atomic adds (posted by the
// sender once their writes completed with FI_DELIVERY_COMPLETE). Short runs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "../provider_required.h"
#include "testkit/mp_harness.h"
#include "testkit/tsan_transport.h"
#include "testkit/workload_rank.h"
#include "transport/factory.h"

using namespace anyep;
using namespace anyep::proxy;
using namespace anyep::testkit;

namespace {

struct Case {
  const char* provider;
  uint32_t ranks, threads;
  bool chaos;
  bool native = false;  // ProxyConfig::native_atomics (+ want_atomics, delivery_complete)
};

class ProxyMp : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(ProxyMp, StreamWorkloadInvariantsHold) {
  const Case c = GetParam();
  ::setenv("FI_TCP_IFACE", "lo", 0);
  std::string why;
  ANYEP_REQUIRE_PROVIDER(transport::available(c.provider, &why), c.provider, why);
  testkit::RunOptions opt;
  opt.timeout_s = 90;
  auto res = testkit::run_ranks(
      c.ranks,
      [&](testkit::Rank& r) {
        WorkloadConfig w;
        w.seed = 20261122 + c.ranks * 7 + c.chaos;
        w.ranks = r.size;
        w.producers = 2;
        w.ll_rounds = c.ranks <= 2 ? 24 : 10;  // 2 cores run every process: keep it short
        w.ht_chunks = c.ranks <= 2 ? 48 : 20;
        w.timeout_s = 40;
        ProxyConfig pc;
        pc.timeout_ns = 40'000'000'000ull;
        pc.signal_slots = 16;
        pc.native_atomics = c.native;
        RankRun run = run_workload_rank(w, pc, c.threads, *r.boot, [&](uint32_t thread) {
          transport::TransportSpec spec;
          spec.name = c.provider;
          spec.rank = r.rank;
          spec.num_ranks = r.size;
          spec.libfabric.want_atomics = c.native;
          spec.libfabric.delivery_complete = c.native;
          // shm grants FI_ATOMIC only without FI_HMEM (libfabric 1.17); the workload is host memory.
          if (c.native) spec.libfabric.want_hmem = false;
          if (c.chaos) {
            spec.chaos.emplace();
            spec.chaos->seed = 77 + r.rank * 13 + thread;
            spec.chaos->max_delay = 8;
          }
          return make_tsan_aware_transport(spec);  // NIC reads at post time under TSan
        });
        ANYEP_MP_CHECK(run.stats.commands == run.result.commands, "every pushed command retired exactly once");
        if (!c.native) ANYEP_MP_CHECK(!c.chaos || !run.bypass, "the engine runs on an unordered transport");
        // Which path the signals took: all native adds (the receiving engine applied none), or all
        // records (no add posted).
        ANYEP_MP_CHECK(
            run.paths.find(c.native ? "signals: native atomics via" : "signals: emulated") != std::string::npos,
            run.paths);
        if (c.native)
          ANYEP_MP_CHECK(run.stats.signals_native == run.stats.signals_sent && run.stats.signals_native > 0 &&
                             run.stats.signals_applied == 0,
                         "every signal went out as a native add");
        else
          ANYEP_MP_CHECK(run.stats.signals_native == 0 && run.stats.signals_applied > 0, "every signal was emulated");
      },
      opt);
  ANYEP_EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Libfabric, ProxyMp,
                         ::testing::Values(Case{"tcp", 2, 2, false}, Case{"tcp", 2, 1, true}, Case{"tcp", 4, 2, true},
                                           Case{"tcp", 8, 1, false}, Case{"shm", 4, 2, true},
                                           Case{"tcp", 2, 2, false, true}, Case{"tcp", 3, 1, true, true},
                                           Case{"shm", 2, 1, false, true}, Case{"shm", 3, 2, true, true}),
                         [](const auto& i) {
                           return std::string(i.param.provider) + "_" + std::to_string(i.param.ranks) + "ranks_" +
                                  std::to_string(i.param.threads) + "threads" + (i.param.chaos ? "_chaos" : "") +
                                  (i.param.native ? "_native" : "");
                         });

// The negative control of the native path across processes: HT tails unfenced, so each tail's add
// is posted as soon as it is read, while chaos still holds the chunk's writes (up to 4096 polls):
// some rank must see a tail before its chunk's bytes and report it. The fenced runs above, on the
// same transport, never do.
TEST(ProxyMpNative, UnfencedTailOvertakesItsDataUnderChaos) {
  ::setenv("FI_TCP_IFACE", "lo", 0);
  std::string why;
  ANYEP_REQUIRE_PROVIDER(transport::available("tcp", &why), "tcp", why);
  std::string found, all;
  for (uint32_t attempt = 0; attempt < 3 && found.empty(); ++attempt) {
    testkit::RunOptions opt;
    opt.timeout_s = 60;
    auto res = testkit::run_ranks(
        2,
        [&](testkit::Rank& r) {
          WorkloadConfig w;
          w.seed = 20261126 + attempt;
          w.ranks = r.size;
          w.producers = 2;
          w.ll_rounds = 8;
          w.ht_chunks = 48;
          w.timeout_s = 3;  // the peer of a rank that found the fault waits for acks that stop
          w.ht_unfenced_tail = true;
          ProxyConfig pc;
          pc.timeout_ns = 3'000'000'000ull;
          pc.native_atomics = true;
          try {
            run_workload_rank(w, pc, 1, *r.boot, [&](uint32_t thread) {
              transport::TransportSpec spec;
              spec.name = "tcp";
              spec.rank = r.rank;
              spec.num_ranks = r.size;
              spec.libfabric.want_atomics = spec.libfabric.delivery_complete = true;
              spec.libfabric.want_hmem = false;
              spec.chaos.emplace();
              spec.chaos->seed = 31 + attempt * 1000 + r.rank * 13 + thread;
              spec.chaos->max_delay = 4096;
              return make_tsan_aware_transport(spec);
            });
            r.result = "no violation";
          } catch (const DataViolation& v) {
            r.result = std::string("violation: ") + v.what();
          } catch (const std::exception& e) {
            r.result = std::string("other: ") + e.what();
          }
        },
        opt);
    for (const auto& o : res.ranks) {
      all += "\n  attempt " + std::to_string(attempt) + ": " + (o.result.empty() ? o.message : o.result);
      if (o.result.find("violation: ") == 0 && o.result.find("HT tail") != std::string::npos) found = o.result;
    }
  }
  EXPECT_FALSE(found.empty()) << "no unfenced native tail overtook its data in 3 runs:" << all;
  std::cout << "ranks:" << all << "\n";
}
