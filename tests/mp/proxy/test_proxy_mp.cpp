// The randomized stream workload (src/proxy/workload.h) across 2-8 processes over libfabric tcp
// (plain and wrapped in chaos), every rank its own process with its own proxy. Short runs.
#include <gtest/gtest.h>

#include <cstdlib>

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
        RankRun run = run_workload_rank(w, pc, c.threads, *r.boot, [&](uint32_t thread) {
          transport::TransportSpec spec;
          spec.name = c.provider;
          spec.rank = r.rank;
          spec.num_ranks = r.size;
          if (c.chaos) {
            spec.chaos.emplace();
            spec.chaos->seed = 77 + r.rank * 13 + thread;
            spec.chaos->max_delay = 8;
          }
          return make_tsan_aware_transport(spec);  // NIC reads at post time under TSan
        });
        ANYEP_MP_CHECK(run.stats.commands == run.result.commands, "every pushed command retired exactly once");
        ANYEP_MP_CHECK(!c.chaos || !run.bypass, "the engine runs on an unordered transport");
      },
      opt);
  ANYEP_EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Libfabric, ProxyMp,
                         ::testing::Values(Case{"tcp", 2, 2, false}, Case{"tcp", 2, 1, true}, Case{"tcp", 4, 2, true},
                                           Case{"tcp", 8, 1, false}, Case{"shm", 4, 2, true}),
                         [](const auto& i) {
                           return std::string(i.param.provider) + "_" + std::to_string(i.param.ranks) + "ranks_" +
                                  std::to_string(i.param.threads) + "threads" + (i.param.chaos ? "_chaos" : "");
                         });
