// anyep's libfabric backend, unchanged, on the emulated NIC (provider emunic) between real
// processes: the transport's all-to-all check (every byte and immediate exactly once), with and
// without FI_HMEM asked for (granted, yet no CUDA registration: host staging), several ports
// striped, under chaos; native atomic adds; the proxy's stream workload with emulated and native
// signals. ctest runs this binary once per profile (tests/mp/emunic/CMakeLists.txt picks the
// suites and the provider's environment), and once with the provider's early-completion mutation,
// which the all-to-all check must catch.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "../transport/alltoall_check.h"
#include "common/error.h"
#include "testkit/mp_harness.h"
#include "testkit/tsan_transport.h"
#include "testkit/workload_rank.h"
#include "transport/factory.h"
#include "transport/libfabric/libfabric_transport.h"

namespace anyep {
namespace {

transport::TransportSpec emunic_spec(const testkit::Rank& r) {
  transport::TransportSpec spec;
  spec.name = "libfabric";  // the backend chooses no provider: it is named
  spec.rank = r.rank;
  spec.num_ranks = r.size;
  spec.libfabric.provider = "emunic";
  spec.libfabric.want_hmem = false;
  return spec;
}

// What the backend negotiates with each profile: efa unordered without atomics, verbs ordered
// with atomics (used natively only without FI_MR_LOCAL); FI_HMEM granted, CUDA registration not
// (no GPU mover), so GPU buffers are staged through host memory.
TEST(EmunicBackend, CapabilitiesFollowTheProfile) {
  transport::libfabric::LibfabricConfig cfg;
  cfg.provider = "emunic";
  cfg.want_atomics = true;
  auto t = transport::libfabric::make_libfabric_transport(0, 1, cfg);
  const auto& c = t->capabilities();
  const std::string d = transport::libfabric::describe(*t);
  std::cout << "[ info ] " << d << " ordered_writes=" << c.ordered_writes << " native_atomics=" << c.native_atomics
            << "\n";
  EXPECT_EQ(c.provider, "emunic");
  EXPECT_EQ(c.imm_bytes, 4u);
  EXPECT_FALSE(c.gpu_memory);
  EXPECT_NE(d.find("hmem=yes"), std::string::npos) << d;
  const bool verbs = d.find("provider_atomics=yes") != std::string::npos;
  EXPECT_EQ(c.ordered_writes, verbs) << d;
  EXPECT_EQ(d.find("tx_order=none") != std::string::npos, !verbs) << d;
  EXPECT_EQ(c.native_atomics, verbs && d.find("LOCAL") == std::string::npos) << d;
  // GPU memory is refused clearly (the caller then registers host-staged buffers).
  std::vector<uint8_t> buf(64);
  EXPECT_THROW(t->register_memory(buf.data(), buf.size(), transport::MemKind::kCuda), Unsupported);
  EXPECT_NO_THROW(t->register_memory(buf.data(), buf.size(), transport::MemKind::kHost));
}

// A peer whose endpoint went away (rank 1 returns, closing its transport): rank 0's writes to it
// complete with an error that names the lost peer, within the provider's liveness check.
TEST(EmunicBackend, LostPeerIsAnErrorCompletion) {
  testkit::RunOptions opt;
  opt.timeout_s = 60;
  auto res = testkit::run_ranks(
      2,
      [&](testkit::Rank& r) {
        // The buffer outlives the endpoint: rank 0 keeps writing into rank 1's until it is closed.
        std::vector<uint8_t> buf(4096, static_cast<uint8_t>(r.rank));
        auto t = transport::make_transport(emunic_spec(r));
        auto id = t->register_memory(buf.data(), buf.size(), transport::MemKind::kHost);
        transport::connect_all(*t, *r.boot, {id});
        r.boot->barrier();
        if (r.rank == 1) return;  // closes its endpoint
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        transport::Completion cq[16];
        transport::ImmEvent im[16];
        size_t nc = 0, ni = 0;
        uint64_t ctx = 0;
        while (true) {
          ANYEP_MP_CHECK(std::chrono::steady_clock::now() < deadline, "no error completion in 30 s");
          transport::WriteDesc w;
          w.dst_rank = 1;
          w.local_mr = id;
          w.remote_mr = id;
          w.length = buf.size();
          w.context = ++ctx;
          const int rc = t->post_write(w);
          ANYEP_MP_CHECK(rc == 0 || rc == -EAGAIN, "post_write: " + t->last_error());
          ANYEP_MP_CHECK(t->poll(cq, 16, &nc, im, 16, &ni) == 0, t->last_error());
          for (size_t k = 0; k < nc; ++k)
            if (cq[k].status != 0) {
              ANYEP_MP_CHECK(t->last_error().find("peer lost") != std::string::npos, t->last_error());
              std::cout << "[ info ] " << t->last_error() << "\n";
              return;
            }
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
      },
      opt);
  ANYEP_EXPECT_RANKS_OK(res);
}

struct A2a {
  uint32_t ranks;
  bool chaos;
  bool hmem;      // ask for FI_HMEM (granted by emunic; no CUDA here, so the backend stages through host memory)
  uint32_t nics;  // ports striped over (ANYEP_EMUNIC_PORTS must offer them)
};

class Alltoall : public ::testing::TestWithParam<A2a> {};

TEST_P(Alltoall, EveryByteAndImmediateExactlyOnce) {
  const A2a c = GetParam();
  std::string why;
  ASSERT_TRUE(transport::libfabric::provider_available("emunic", &why)) << why << " (FI_PROVIDER_PATH?)";
  testkit::RunOptions opt;
  opt.timeout_s = 90;
  auto res = testkit::run_ranks(
      c.ranks,
      [&](testkit::Rank& r) {
        transport::TransportSpec spec = emunic_spec(r);
        spec.libfabric.want_hmem = c.hmem;
        spec.libfabric.num_nics = c.nics;
        if (c.chaos) {
          spec.chaos.emplace();
          spec.chaos->seed = 20261202 + r.rank;
          spec.chaos->max_delay = 16;
        }
        auto t = transport::make_transport(spec);
        const auto& caps = t->capabilities();
        ANYEP_MP_CHECK(caps.provider == "emunic", "provider " + caps.provider);
        ANYEP_MP_CHECK(!caps.gpu_memory, "no GPU mover here: CUDA memory must go through host staging");
        if (!c.chaos) std::cout << "[ info ] " << transport::libfabric::describe(*t) << "\n";
        mptest::AlltoallSpec a;
        a.writes_per_peer = c.ranks <= 2 ? 8 : 4;
        a.seed = c.ranks * 31 + (c.chaos ? 7 : 0) + c.nics;
        a.max_bytes = 1ull << 20;
        a.timeout_s = 60;
        auto st = mptest::run_alltoall(*t, *r.boot, a);
        ANYEP_MP_CHECK(st.imms_received == (r.size - 1) * (a.writes_per_peer + 1), "immediate count");
      },
      opt);
  ANYEP_EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Emunic, Alltoall,
                         ::testing::Values(A2a{2, false, false, 1}, A2a{4, false, true, 1}, A2a{4, true, false, 1},
                                           A2a{3, false, false, 2}),
                         [](const auto& i) {
                           const A2a& c = i.param;
                           return std::to_string(c.ranks) + "ranks" + (c.chaos ? "_chaos" : "") +
                                  (c.hmem ? "_hmem" : "") + (c.nics > 1 ? "_" + std::to_string(c.nics) + "ports" : "");
                         });

// Native adds (verbs with ANYEP_EMUNIC_MR_LOCAL=0: the backend uses them only without FI_MR_LOCAL):
// every rank adds to every peer's words; each total exact, each add completed once, and its
// completion only once the add is applied.
TEST(EmunicAtomics, EveryRankAddsToEveryPeerExactlyOnce) {
  constexpr size_t kWords = 3;
  constexpr int kRounds = 64;
  constexpr uint32_t kDone = 0x4000u;
  testkit::RunOptions opt;
  opt.timeout_s = 90;
  auto res = testkit::run_ranks(
      3,
      [&](testkit::Rank& r) {
        transport::TransportSpec spec = emunic_spec(r);
        spec.libfabric.want_atomics = true;
        auto t = transport::make_transport(spec);
        ANYEP_MP_CHECK(t->capabilities().native_atomics,
                       "no native atomics granted: " + transport::libfabric::describe(*t));
        std::vector<uint64_t> words(kWords, 0);
        auto id = t->register_memory(words.data(), words.size() * 8, transport::MemKind::kHost);
        transport::connect_all(*t, *r.boot, {id});
        const uint32_t n = r.size;
        uint64_t posted = 0, completed = 0, done_comps = 0;
        uint32_t dones = 0;
        bool done_sent = false;
        transport::Completion cq[64];
        transport::ImmEvent im[64];
        size_t nc = 0, ni = 0;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        auto drain = [&] {
          ANYEP_MP_CHECK(std::chrono::steady_clock::now() < deadline, "rank " + std::to_string(r.rank) + " timed out");
          ANYEP_MP_CHECK(t->poll(cq, 64, &nc, im, 64, &ni) == 0, t->last_error());
          for (size_t k = 0; k < nc; ++k) {
            ANYEP_MP_CHECK(cq[k].status == 0, "an add failed: " + t->last_error());
            ++(cq[k].context == UINT64_MAX ? done_comps : completed);
          }
          for (size_t k = 0; k < ni; ++k) {
            ANYEP_MP_CHECK(im[k].imm == kDone, "unexpected immediate " + std::to_string(im[k].imm));
            ++dones;
          }
        };
        for (int k = 0; k < kRounds; ++k)
          for (uint32_t p = 0; p < n; ++p) {
            if (p == r.rank) continue;
            for (size_t i = 0; i < kWords; ++i) {
              const transport::AtomicAddDesc a{p, id, 8 * i, r.rank + 1 + i, posted};
              int rc;
              while ((rc = t->post_atomic_add(a)) == -EAGAIN) drain();
              ANYEP_MP_CHECK(rc == 0, "post_atomic_add: " + t->last_error());
              ++posted;
            }
          }
        while (!(done_sent && dones == n - 1 && done_comps == n - 1)) {
          drain();
          if (!done_sent && completed == posted) {
            for (uint32_t p = 0; p < n; ++p)
              if (p != r.rank) {
                int rc;
                while ((rc = t->post_imm(p, kDone, UINT64_MAX)) == -EAGAIN) drain();
                ANYEP_MP_CHECK(rc == 0, t->last_error());
              }
            done_sent = true;
          }
        }
        for (size_t i = 0; i < kWords; ++i) {
          uint64_t want = 0;
          for (uint32_t s = 0; s < n; ++s)
            if (s != r.rank) want += kRounds * (s + 1 + i);
          ANYEP_MP_CHECK(
              __atomic_load_n(&words[i], __ATOMIC_SEQ_CST) == want,
              "word " + std::to_string(i) + " = " + std::to_string(words[i]) + ", want " + std::to_string(want));
        }
        r.boot->barrier();
      },
      opt);
  ANYEP_EXPECT_RANKS_OK(res);
}

struct ProxyCase {
  uint32_t ranks, threads;
  bool chaos;
  bool native;
};

class Proxy : public ::testing::TestWithParam<ProxyCase> {};

// The proxy's stream workload (testkit/workload.h), each rank its own process and proxy.
TEST_P(Proxy, StreamWorkloadInvariantsHold) {
  const ProxyCase c = GetParam();
  testkit::RunOptions opt;
  opt.timeout_s = 90;
  auto res = testkit::run_ranks(
      c.ranks,
      [&](testkit::Rank& r) {
        testkit::WorkloadConfig w;
        w.seed = 20261202 + c.ranks * 7 + c.chaos;
        w.ranks = r.size;
        w.producers = 2;
        w.ll_rounds = c.ranks <= 2 ? 24 : 10;
        w.ht_chunks = c.ranks <= 2 ? 48 : 20;
        w.timeout_s = 40;
        proxy::ProxyConfig pc;
        pc.timeout_ns = 40'000'000'000ull;
        pc.signal_slots = 16;
        pc.native_atomics = c.native;
        testkit::RankRun run = testkit::run_workload_rank(w, pc, c.threads, *r.boot, [&](uint32_t thread) {
          transport::TransportSpec spec = emunic_spec(r);
          spec.libfabric.want_atomics = c.native;
          spec.libfabric.delivery_complete = c.native;
          if (c.chaos) {
            spec.chaos.emplace();
            spec.chaos->seed = 77 + r.rank * 13 + thread;
            spec.chaos->max_delay = 8;
          }
          return testkit::make_tsan_aware_transport(spec);
        });
        ANYEP_MP_CHECK(run.stats.commands == run.result.commands, "every pushed command retired exactly once");
        if (c.native)
          ANYEP_MP_CHECK(run.stats.signals_native == run.stats.signals_sent && run.stats.signals_native > 0 &&
                             run.stats.signals_applied == 0,
                         "every signal went out as a native add: " + run.paths);
        else
          ANYEP_MP_CHECK(run.stats.signals_native == 0 && run.stats.signals_applied > 0,
                         "every signal was emulated: " + run.paths);
      },
      opt);
  ANYEP_EXPECT_RANKS_OK(res);
}

INSTANTIATE_TEST_SUITE_P(Emunic, Proxy,
                         ::testing::Values(ProxyCase{2, 2, false, false}, ProxyCase{3, 1, true, false},
                                           ProxyCase{2, 1, false, true}, ProxyCase{3, 2, true, true}),
                         [](const auto& i) {
                           const ProxyCase& c = i.param;
                           return std::to_string(c.ranks) + "ranks_" + std::to_string(c.threads) + "threads" +
                                  (c.chaos ? "_chaos" : "") + (c.native ? "_native" : "_emulated");
                         });

}  // namespace
}  // namespace anyep
